"""Serial test configuration.

GPU kernels (numba.cuda) are tested on the CPU through numba's CUDA simulator, which must be
switched on before numba.cuda is first imported. On a machine with a GPU, run the tests with
NUMBA_ENABLE_CUDASIM=0 to check the same kernels on the device.

The workers' timer slack is coarsened (launch_env.coarsen_timer_slack), for the jobs they launch.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_env import coarsen_timer_slack  # noqa: E402

# before any thread or job starts: every job the tests launch inherits it (launch_env.py)
coarsen_timer_slack()

# The modules whose tests mostly wait (on the jobs they launch, a watchdog's timeout, Slurm)
# and take longest, run first: pytest-xdist hands whole files to its workers in collection
# order (./tasks test passes --no-loadscope-reorder), and a long file started last would
# leave one worker running it alone at the end.
FIRST = ("test_call_mismatch.py", "test_signals.py", "test_slurm.py", "test_mpi_harness.py",
         "test_als_cli.py", "test_experiments.py", "test_mpmd.py", "test_watchdog.py")


def pytest_collection_modifyitems(items):
    order = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(FIRST)))  # stable
