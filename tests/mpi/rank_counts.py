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
tests/mpi/rank_counts.py --stages`` prints them, ``--measured`` the modules of
:data:`MEASURED`, ``--measured N`` those of them that run at N; without an argument it
prints the table).
The standard library only: ``tasks`` reads it without MPI.
"""

from __future__ import annotations

import sys

EVERY = (1, 2, 3, 4, 8)  # the stages of ./tasks test for a module not listed below

# What each call does on every family's layout (typed blocks, the edge operations, values and
# widths per call, prepared and bound calls, close), and the layers built on it whose own code
# follows the layout (GAT, distmm.torch's node and edge tensors): 1 (everything local, no word
# moves), 3 (an uneven split; c = 3, layers of one rank) and 4 (the 2D grid of the 2.5D
# families, q = 2; 1.5D layers of two ranks, c = 2; c = 4). The ring of two (2) and the 2.5D
# grid with c > 1 (8) are the family's own loop, which the family modules test there.
LAYOUT = (1, 3, 4)
# What is built on the families and reaches the layout only through them (wiring, the
# applications' own arithmetic, the command line in-process, the other node models' local
# kernels): 1 and 3, everything local and an uneven split with c = 1 and c = 3
BUILT = (1, 3)
# Claims about ranks that can differ (per-rank files, the ranks agreeing on the tuner's pick),
# the same code at every p > 1: the smallest such run, 2, and a middle rank that is neither
# the first nor the last, 3
DIFFER = (2, 3)
# The checks every call makes before any work: one agreement over the object's communicator,
# the same collective on every grid, and each rank's block checks, which meet every grid kind
# (a 2D grid, layers of several ranks, layers of one) by 4; 8 adds only larger grids of kinds
# met at 4
CHECKS = (1, 2, 3, 4)
# The memory models against the operating system's peak resident set: 1 (no communication
# buffers), 2 (the ring of two: test_memory_rss.py measures the families' c = 1 there only)
# and 4 (the 2D grid of the 2.5D families, q = 2; a ring of four; c = 4, layers of one rank)
RSS = (1, 2, 4)
# ALS and GAT measured at c = 1 and the deepest c: at 4 that is a ring of four and layers of
# one rank (the kinds 2 gives, a ring and c = p) and the 2.5D families' 2D grid, so 2 adds
# no buffer of another kind
RSS_APPS = (1, 4)

RANK_COUNTS: dict[str, tuple[int, ...]] = {
    # per-call features that every family shares
    "test_bound_calls.py": LAYOUT,
    "test_close.py": LAYOUT,
    # what each family keeps between calls, freed: the buffers of a ring (c = 1) and of layers
    # of one rank (c = p), both met at 3 (2 has no other kind); traced allocations make it
    # costly at 4
    "test_release.py": BUILT,
    "test_dense_blocks.py": LAYOUT,
    "test_ops_dense.py": LAYOUT,
    "test_ops_edges.py": LAYOUT,
    "test_ops_softmax.py": LAYOUT,
    "test_prepared_calls.py": LAYOUT,
    "test_r_per_call.py": LAYOUT,
    "test_row_dot.py": LAYOUT,
    "test_set_values.py": LAYOUT,
    "test_values_per_call.py": LAYOUT,
    "test_write_mode.py": LAYOUT,
    "test_ops_methods.py": BUILT,  # each method is its function (tested above): wiring
    # the reader is one of every p (test_io_mpi.py); here the conversion and its round trip
    "test_hdf5_input.py": BUILT,
    "test_checks.py": CHECKS,
    "test_call_agreement.py": CHECKS,
    "test_edge_mismatch.py": CHECKS,
    # applications and PyTorch; distmm.torch's node tensors follow the layout, its autograd
    # functions are the family's operations (tested at every count) and their transposes
    # GAT on every family equals 1.5D dense shifting's: the row-group all-gathers and
    # transfers of the column-split families meet the ring of two at 2, the 2.5D grid with
    # c = 2 at 8
    "test_gat.py": EVERY,
    "test_gat_fused.py": LAYOUT,
    "test_sddmm_multi.py": EVERY,  # the multi-head SDDMM on every family and c
    "test_torch_graph.py": LAYOUT,
    "test_torch_edges.py": BUILT,
    "test_torch_kernels.py": BUILT,
    # bitwise repeats at a fixed p: the reductions over fibers (c = 3) and rings (c = 1) at 3
    "test_determinism.py": BUILT,
    "test_als.py": BUILT,
    "test_als_cli_input.py": BUILT,  # the command's refusals: one rank, and ranks 1 and 2 silent
    "test_cli.py": BUILT,
    "test_gat_cli.py": BUILT,
    "test_ops_gat_example.py": BUILT,
    # distmm.torch's layers against PyG, the example ports, gradcheck and the refusals: at
    # the counts its users are promised (1 to 4; the ports at 2), not only where the layout
    # first differs
    "test_torch_layers.py": CHECKS,
    "test_torch_pitfalls.py": CHECKS,
    "test_torch_attention.py": CHECKS,
    "test_node_model_dynaspase.py": BUILT,
    "test_node_model_hash_spgemm.py": BUILT,  # 1: it runs; 3: it refuses more than one rank
    "test_node_model_sparch.py": BUILT,
    "test_node_model_sputnik.py": BUILT,
    "test_io_layer.py": DIFFER,
    "test_tune.py": DIFFER,
    # calibration refuses one rank; at 3 a rank stays out of the ping-pong of ranks 0 and 1
    "test_calibrate.py": (1, 3),
    # memory models against the operating system's peak resident set (large problems, most of
    # the CPU time of a stage): at the counts test_memory_rss.py's cases name, one rank, a
    # shift and the deepest c; the models' bytes are checked against the arrays a rank holds
    # at every count (test_memory_model.py)
    "test_memory_rss.py": RSS,
    # relay= and --relay: 1 (no exchange), 2 (a layer of two, where no tree can form) and 3
    # (the smallest layer where the relay engages)
    "test_relay_option.py": (1, 2, 3),
    # long runs of calls and of distribute/close cycles: one rank (no sub-communicators) and
    # the 2D grid of the 2.5D families with layers of two (4). What leaks is per call or per
    # object, not per rank count: 2 and 3 prove nothing these do not, and 8 takes minutes
    "test_leaks.py": (1, 4),
    "test_als_memory.py": RSS_APPS,
    "test_gat_memory.py": RSS_APPS,
}

# Modules that measure a rank's peak resident set: ./tasks test runs them in an mpiexec stage
# of their own, with nothing else on the cores (beside the serial workers they read 0.4x and
# 1.33x the model), where the other one-rank modules run beside the serial tests
MEASURED = ("test_memory_rss.py", "test_als_memory.py", "test_gat_memory.py")


def runs_at(module: str, size: int) -> bool:
    """Whether the module file ``module`` (a base name) runs on ``size`` ranks."""
    return module not in RANK_COUNTS or size in RANK_COUNTS[module]


def stage_counts() -> list[int]:
    """Every rank count some module runs at: one ``mpiexec`` stage each, in increasing order."""
    return sorted({*EVERY, *(n for ns in RANK_COUNTS.values() for n in ns)})


if __name__ == "__main__":
    if sys.argv[1:] == ["--stages"]:
        print(*stage_counts())
    elif sys.argv[1:] == ["--measured"]:
        print(*MEASURED)
    elif sys.argv[1:2] == ["--measured"] and len(sys.argv) == 3:
        print(*(m for m in MEASURED if runs_at(m, int(sys.argv[2]))))
    else:
        for name, ns in sorted(RANK_COUNTS.items()):
            print(f"{name:34s} {' '.join(map(str, ns))}")
        print(f"{'(any other module)':34s} {' '.join(map(str, EVERY))} (and any other count)")
