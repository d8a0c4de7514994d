import os
import sys

# Under pytest-xdist each worker gets an equal share of the cores for its numeric libraries (set before torch and
# numpy load their thread pools), so that parallel workers do not oversubscribe the machine.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_THREADS = max(1, min(2, (os.cpu_count() or 1) // _WORKERS))
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_variable, str(_THREADS))

import pickle  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from filelock import FileLock  # noqa: E402
from hypothesis import settings  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))  # tests/problems.py
torch.set_num_threads(_THREADS)
settings.register_profile("certify", deadline=None, max_examples=25, derandomize=True, print_blob=True)
settings.register_profile("scale-fuzz", parent=settings.get_profile("certify"), max_examples=400)  # test_float_edges
# HYPOTHESIS_PROFILE=slow: bug hunting, 10x the examples of the tests that take the default count, random seeds
settings.register_profile("slow", parent=settings.get_profile("certify"), max_examples=250, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "certify"))


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    """``shared(key, compute)``: ``compute()`` once per test run, also across pytest-xdist workers (``make test``
    runs two or more): the first caller pickles the value to the run's temporary folder, under a lock that makes a
    concurrent caller wait for it rather than compute it again. For expensive fixtures used by several tests (xdist's
    ``--dist loadgroup``, which would keep them on one worker, does not work with pytest 9)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "shared"
    root.mkdir(exist_ok=True)
    memo: dict[str, object] = {}

    def get(key: str, compute):
        if key not in memo:
            path = root / f"{key}.pickle"
            with FileLock(f"{path}.lock"):
                if not path.exists():
                    path.write_bytes(pickle.dumps(compute()))
                memo[key] = pickle.loads(path.read_bytes())
        return memo[key]

    return get
