"""Every upstream CuTe DSL example must compile under `@gcdsl.kernel` to the PTX it compiles to under `@cute.kernel`.

Needs `GCDSL_UPSTREAM_EXAMPLES` (the `examples/python/CuTeDSL` folder of an
NVIDIA/cutlass checkout); without it every case is skipped at once. Marked
`upstream`: `-m upstream` runs only the sweep, `-m "not upstream"` leaves it out.
Each case compiles its example twice, in two concurrent processes;
`--upstream-jobs N` keeps N examples in flight (default 1, which fills two
cores). A table of the outcomes, with each example's time, ends the run.

    GCDSL_UPSTREAM_EXAMPLES=.../examples/python/CuTeDSL python -m pytest -m upstream -q
"""
import concurrent.futures

import pytest

from tests.upstream.catalogue import load_all
from tests.upstream_compat import ENV_VAR, Outcome, examples_root, run_pair

EXAMPLES = load_all()
OUTCOMES = []  # read by the terminal summary in conftest.py

pytestmark = [
    pytest.mark.upstream,
    pytest.mark.skipif(not examples_root(), reason=f"{ENV_VAR} is not set"),
]


@pytest.fixture(scope="session")
def upstream_runs(request, tmp_path_factory):
    """Start every selected example now, in test order, `--upstream-jobs` at a time."""
    names = [item.callspec.params["name"] for item in request.session.items
             if item.get_closest_marker("upstream") and hasattr(item, "callspec")]
    work = str(tmp_path_factory.mktemp("upstream"))
    jobs = max(1, request.config.getoption("upstream_jobs"))
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    futures = {name: pool.submit(run_pair, name, work) for name in names}
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_upstream_example(name, upstream_runs):
    outcome: Outcome = upstream_runs[name].result()
    OUTCOMES.append(outcome)
    if outcome.skip:
        pytest.skip(outcome.skip)
    gcdsl = outcome.gcdsl
    assert gcdsl["ok"], (f"compiles under @cute.kernel but not under @gcdsl.kernel: "
                         f"{gcdsl['error_type']}: {gcdsl['error']} ({gcdsl.get('where', '')})\n{gcdsl['traceback']}")
    assert outcome.identical, f"PTX differs after normalisation:\n{outcome.difference}"
