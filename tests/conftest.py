import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# four CPU devices for the data-parallel tests (computations elsewhere stay on the first one)
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
sys.path.insert(0, os.path.dirname(__file__))

from jax_backend.files import enable_compilation_cache  # noqa: E402

# programs compiled by an earlier run (or an earlier test) load from the persistent cache
# (JAXGS_COMPILATION_CACHE=off compiles everything); the ns-* commands the tests start use it too
enable_compilation_cache()

# With several pytest-xdist workers, every core already runs a worker: a worker that also dealt its
# views' tiles over the cores (the CPU default) would put two busy devices on each core. The
# workers deal over one device (`cores_for_tiles`); the tests of the dealing set their device
# counts themselves, and the slow suite (one process) keeps the default.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("JAXGS_TILE_DEVICES", "1")


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per usable core, at most 4, for the default suite.
    Compiling a program keeps about one core busy, so on two cores two workers take the default
    suite from ~10.5 to ~7.5 minutes with an empty compilation cache; each worker holds its own JAX
    and torch (1-3 GiB). The slow suite (`-m slow`) runs in this process: its ns-* commands already
    use every core (two at a time took 13:51 against 10:28), and its mistake table's module fixture
    would run once per worker."""
    marks = (config.option.markexpr or "").replace("not slow", "")
    if "slow" in marks:
        return 0
    from jax_backend.devices import cpu_cores

    return max(1, min(cpu_cores(), 4))


import pytest  # noqa: E402


def pytest_runtest_setup(item):
    """`@pytest.mark.devices(n)`: the test needs n JAX devices, and fails (never skips) without them:
    an XLA_FLAGS that sets fewer CPU devices than this file's 4 would otherwise pass it unrun."""
    mark = item.get_closest_marker("devices")
    if mark is None:
        return
    import jax

    have = len(jax.local_devices())
    if have < mark.args[0]:
        pytest.fail(f"needs {mark.args[0]} JAX devices, this process has {have} (XLA_FLAGS="
                    f"{os.environ.get('XLA_FLAGS', '')!r}; tests/conftest.py sets 4 CPU devices unless it names a count)",
                    pytrace=False)


@pytest.fixture
def built_for_tpu(monkeypatch):
    """Programs traced inside the test compute as a TPU program does where the computation is chosen
    when lowering (`array_ops.per_platform`: radix sorts, SSIM by slices) and run on this CPU; the
    choices of structure take a platform argument, which the test passes ("tpu"). JAX's trace
    caches are cleared on entry and exit so that no program traced one way is reused the other.
    Yields the list the radix sorts built meanwhile append to."""
    import jax

    from jax_backend import array_ops

    radix_calls = []
    radix_sort = array_ops.radix_sort
    monkeypatch.setattr(array_ops, "per_platform", lambda *args, tpu, default: tpu(*args))
    monkeypatch.setattr(array_ops, "radix_sort", lambda *a, **k: radix_calls.append(1) or radix_sort(*a, **k))
    jax.clear_caches()
    yield radix_calls
    monkeypatch.undo()
    jax.clear_caches()


@pytest.fixture(params=["cpu", "tpu"])
def sort_policy(request):
    """The sorts as this CPU runs them, and as they are built for a TPU (`built_for_tpu`: radix
    sorts), both checked on the CPU; the TPU run must have used a radix sort."""
    if request.param == "cpu":
        yield "cpu"
        return
    calls = request.getfixturevalue("built_for_tpu")
    yield "tpu"
    assert calls, "the TPU policy's radix sort was not used"
