"""Use the real MPI harness (tests/mpi/conftest.py) for the deliberately broken cases here.

The cases are named case_*.py so that no normal run collects them; the serial test
tests/serial/test_mpi_harness.py passes them explicitly to tests/mpi_pytest.py under mpiexec.
"""

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "mpi" / "conftest.py"
_spec = importlib.util.spec_from_file_location("_distmm_mpi_harness_conftest", _path)
_mpi_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mpi_conftest)
# Its hooks and fixtures, re-exported so that pytest registers them for this directory too.
globals().update({k: v for k, v in vars(_mpi_conftest).items() if not k.startswith("__")})
