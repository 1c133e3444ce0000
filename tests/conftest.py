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
