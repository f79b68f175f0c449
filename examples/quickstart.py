"""A training-loop-shaped use of distmm: distribute S once, call FusedMM many times.

    .venv/bin/mpiexec -n 4 .venv/bin/python examples/quickstart.py

Every rank builds the same small random graph here; real code passes a file path or a
distributed generator to distmm.distribute instead.
"""

import distmm

distmm.prepare_process()  # before numpy and MPI load: OpenBLAS's threads, MPICH's single copy

# isort: split
import numpy as np  # noqa: E402 - after prepare_process
import scipy.sparse as sp  # noqa: E402
from mpi4py import MPI  # noqa: E402

comm = MPI.COMM_WORLD
n, r = 1000, 16
S = sp.random(n, n, density=0.01, random_state=0, format="csr") if comm.rank == 0 else None
H = np.random.default_rng(1).standard_normal((n, r)) if comm.rank == 0 else None

# Place S once on a (p/c) x c grid; c must divide the number of ranks.
c = 2 if comm.size % 2 == 0 else 1
op = distmm.distribute(S, comm, algorithm="15d-dense-shift", c=c)

# Each rank holds one block of A and of B; scatter/gather handle the layout and permutation.
A = op.scatter("a", H)
B = op.scatter("b", H)
for _ in range(3):                                   # e.g. three GAT-like steps
    A = op.fusedmm_a(A, B, strategy="fusion")        # returned in A's own distribution
    A /= max(comm.allreduce(float(np.abs(A).max(initial=0)), op=MPI.MAX), 1e-30)

    # New edge weights without redistributing S: values are per stored nonzero.
    op.set_values(np.abs(op.sddmm(A, B)) + 1e-3)

result = op.gather("a", A)                           # on rank 0, original row order
report = op.stats.report()                                 # collective: every rank calls it
if comm.rank == 0:
    words = report["phases"]
    print("result", result.shape, "finite:", bool(np.isfinite(result).all()))
    print("words sent per rank (max):",
          {ph: v["words_sent"]["max"] for ph, v in words.items() if "words_sent" in v})

op.close()                                           # frees the grid communicators
