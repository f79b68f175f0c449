"""Serial test configuration.

GPU kernels (numba.cuda) are tested on the CPU through numba's CUDA simulator, which must be
switched on before numba.cuda is first imported. On a machine with a GPU, run the tests with
NUMBA_ENABLE_CUDASIM=0 to check the same kernels on the device.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
