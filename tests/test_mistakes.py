"""The user-mistake table (`tests/mistakes.py`), run through the real ns-* commands: every case
ends with the exit status it must, its last line names the culprit, and the files already written
are byte-identical afterwards. The cases run two at a time (they are mostly process start-up)."""
from concurrent.futures import ThreadPoolExecutor

import pytest


from mistakes import MISTAKES, Outcome, train_once, try_mistake  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("mistakes")
    trained = train_once(root)

    def one(m):
        tmp = root / m.name
        tmp.mkdir()
        try:
            return m.name, try_mistake(m, tmp, trained)
        except Exception as e:  # noqa: BLE001  reported by this case's test alone, not by all of them
            return m.name, (Outcome(-999, f"the case raised {e!r}"[:300], "", 0.0), [f"the case raised {e!r}"])

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(one, MISTAKES))


@pytest.mark.parametrize("name", [m.name for m in MISTAKES])
def test_mistake(outcomes, name):
    out, problems = outcomes[name]
    assert not problems, f"{name}: {problems}\nlast line: {out.last}\n{out.output[-3000:]}"
