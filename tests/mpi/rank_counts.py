"""At which rank counts ``./tasks test`` runs each module of tests/mpi.

A module runs at the rank counts where its claim can break, and no others: a claim about
every family's grids runs where each grid shape first appears (1: no neighbour; 2: the
smallest shift, a ring whose left and right neighbour are one rank; 3: an uneven split and
c = p; 4: a 2D grid, q = 2, and layers of several ranks, c = 2; 8: q = 2 with c = 2, the true
2.5D grid, and c = 8), a claim built on the families (what each call does, the applications,
the node models) where the layouts it depends on differ. A module not listed here runs at
every count (``./tasks test``'s are ``EVERY``; a hand-run at any other size runs it too): a new
module is never silently left out; list it when its claim needs fewer.

tests/mpi/conftest.py leaves a module out of a run over a directory at a rank count its set
lacks, and names it; a module named on the command line runs at any count, and
``DISTMM_TEST_EVERY_RANK_COUNT=1`` runs every module at every count. ``./tasks test`` starts
one ``mpiexec`` stage for each count of :func:`stage_counts` (``python
tests/mpi/rank_counts.py`` prints them). Pure Python, no imports: ``tasks`` reads it without
MPI.
"""

from __future__ import annotations

import sys

EVERY = (1, 2, 3, 4, 8)  # the stages of ./tasks test for a module not listed below

# What is built on the families, and what every family's call does the same way, runs at:
# 1 (everything local, no word moves), 3 (an uneven split; c = 3, layers of one rank) and 4
# (a 2D grid of the 2.5D families, c = 2 layers of two ranks, c = 4). The ring of two (2) and
# the 2.5D grid with c > 1 (8) belong to the family's own loop, which the family modules
# (DEFAULT) test at those counts.
BUILT_ON = (1, 3, 4)
# Claims that need ranks that can differ or a layout with several ranks per layer, but whose
# code is the same at every p > 1 (per-rank files, the tuner's agreement, the command line)
SEVERAL = (3, 4)

RANK_COUNTS: dict[str, tuple[int, ...]] = {
    # per-call features that every family shares
    "test_bound_calls.py": BUILT_ON,
    "test_close.py": BUILT_ON,
    "test_dense_blocks.py": BUILT_ON,
    "test_hdf5_input.py": BUILT_ON,
    "test_ops_dense.py": BUILT_ON,
    "test_ops_edges.py": BUILT_ON,
    "test_ops_methods.py": BUILT_ON,
    "test_ops_softmax.py": BUILT_ON,
    "test_prepared_calls.py": BUILT_ON,
    "test_r_per_call.py": BUILT_ON,
    "test_row_dot.py": BUILT_ON,
    "test_set_values.py": BUILT_ON,
    "test_values_per_call.py": BUILT_ON,
    "test_write_mode.py": BUILT_ON,
    # applications, command line, PyTorch
    "test_als.py": BUILT_ON,
    "test_cli.py": BUILT_ON,
    "test_determinism.py": BUILT_ON,
    "test_gat.py": BUILT_ON,
    "test_gat_cli.py": BUILT_ON,
    "test_gat_fused.py": BUILT_ON,
    "test_ops_gat_example.py": BUILT_ON,
    "test_torch_edges.py": BUILT_ON,
    "test_torch_graph.py": BUILT_ON,
    "test_torch_kernels.py": BUILT_ON,
    "test_torch_layers.py": BUILT_ON,
    "test_torch_pitfalls.py": BUILT_ON,
    "test_io_layer.py": SEVERAL,
    "test_tune.py": SEVERAL,
    # calibration's fit has a one-rank path and a pairwise one; 3 ranks: a rank without a pair
    "test_calibrate.py": (1, 3),
    # the other node models: the local kernel sees the whole S (1) or a block of a 2D grid and
    # of a layer (4); hash-spgemm's command refuses more than one rank (4)
    "test_node_model_dynaspase.py": (1, 4),
    "test_node_model_hash_spgemm.py": (1, 4),
    "test_node_model_sparch.py": (1, 4),
    "test_node_model_sputnik.py": (1, 4),
    # measured against the operating system at the counts its own cases name
    "test_memory_rss.py": (1, 2, 4),
}


def runs_at(module: str, size: int) -> bool:
    """Whether the module file ``module`` (a base name) runs on ``size`` ranks."""
    return module not in RANK_COUNTS or size in RANK_COUNTS[module]


def stage_counts() -> list[int]:
    """Every rank count some module runs at: one ``mpiexec`` stage each, in increasing order."""
    return sorted({*EVERY, *(n for ns in RANK_COUNTS.values() for n in ns)})


if __name__ == "__main__":
    if sys.argv[1:] == ["--stages"]:
        print(*stage_counts())
    else:
        for name, ns in sorted(RANK_COUNTS.items()):
            print(f"{name:34s} {' '.join(map(str, ns))}")
        print(f"{'(any other module)':34s} {' '.join(map(str, EVERY))} (and any other count)")
