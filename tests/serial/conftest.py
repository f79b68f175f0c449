"""Serial test configuration.

GPU kernels (numba.cuda) are tested on the CPU through numba's CUDA simulator, which must be
switched on before numba.cuda is first imported. On a machine with a GPU, run the tests with
NUMBA_ENABLE_CUDASIM=0 to check the same kernels on the device.

The workers' timer slack is coarsened (launch_env.coarsen_timer_slack), for the jobs they launch.
"""

import os
from pathlib import Path

# pytest puts this directory on the import path before it imports this file, as for the tests
from launch_env import coarsen_timer_slack

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# before any thread or job starts: every job the tests launch inherits it (launch_env.py)
coarsen_timer_slack()

# The longest modules run first, longest first: pytest-xdist hands whole files to its workers
# in collection order (./tasks test passes --no-loadscope-reorder), and a long file started
# last would leave one worker running it alone at the end. First those that launch jobs and
# wait on them (a watchdog's timeout, a signal, Slurm), test_signals.py, whose jobs compute,
# second, so that the two workers do not start both waiting; then those that compute; the
# short files fill the end.
FIRST = ("test_watchdog.py", "test_signals.py", "test_call_mismatch.py", "test_slurm.py",
         "test_mpi_harness.py", "test_mpmd.py", "test_rank_threads.py", "test_als_cli.py",
         "test_sputnik.py", "test_benchmarks.py", "test_end_to_end.py", "test_experiments.py",
         "test_determinism_threads.py", "test_blocks_and_model.py", "test_fuzz_readers.py",
         "test_reference_kernels.py", "test_hash_spgemm_cuda.py", "test_pairwise_setting.py")
assert all((Path(__file__).parent / name).is_file() for name in FIRST), "FIRST names a lost file"


def pytest_collection_modifyitems(items):
    order = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(FIRST)))  # stable
