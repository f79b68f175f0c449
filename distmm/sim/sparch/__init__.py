"""SpArch: a transaction-level simulator of the outer-product SpGEMM accelerator of
Li, Zhang, Wang, Han, "SpArch: Efficient Architecture for Sparse Matrix Multiplication",
HPCA 2020 (shared/papers/sparch-hpca2020.txt).

A call computes the exact C = X @ Y (:mod:`.numeric`) and, beside it, what one SpArch chip
would spend on it: cycles, DRAM bytes by kind and energy (:mod:`.model`). The model follows
section II:

* **Partial matrices** (II-B). With matrix condensing, the i-th stored element of every CSR row
  of X forms condensed column i, so there are ``max row length`` partial matrices; without it,
  one per non-empty column of X (OuterSPACE's outer products). Their sizes are the products
  they hold (:mod:`.structure`).
* **Merge order** (II-C). A merge round merges up to 64 nodes (2**layers). The ``huffman``
  scheduler builds the 64-ary Huffman tree with the paper's k_init (Formula 1), weights of
  merged nodes estimated as sums; ``sequential`` chains rounds in column order (Fig. 8);
  ``random`` picks nodes uniformly (the ablation baseline of III-C). :mod:`.schedule`.
* **Exact traffic.** The number of distinct coordinates in every merged node -- what is
  written to and read back from DRAM -- is computed exactly from the row structures, without
  simulating comparators (:mod:`.structure`).
* **Row prefetcher** (II-D, II-E). Every multiplication needs a row of Y; rows are cached in a
  buffer of 1024 lines of 48 elements with farthest-next-use (Belady) replacement limited to
  the 8192-element look-ahead FIFO, or LRU, or no buffer (:mod:`.prefetch`).
* **Cycles per round** = max(compute bound, DRAM bound) + fill/drain (:mod:`.model`).
* **Energy** from Table III: 0.26 nJ/FLOP computation + 0.34 nJ/FLOP SRAM + DRAM per byte.

Assumptions where the paper leaves gaps (also in docs/node-models/sparch.md):

1. Transaction level, not cycle level: a round's compute bound is max(products / 16
   multipliers, tree input elements / 16), since every layer shares one 16-wide merger and every
   element crosses every layer; the round overlaps compute and DRAM perfectly, then pays fill
   and drain: DRAM latency (100 cycles, assumed), tree depth x 6 cycles (comparator + adder +
   log2(16) zero eliminator, assumed), filling the look-ahead FIFO, flushing the writer FIFO.
   The 16 row fetchers (one per channel, up to 48 rows ahead, Table I) are assumed to hide
   DRAM latency within a round; bank conflicts and back-pressure inside the tree are not
   modelled.
2. Formats: left and right matrix elements 12 bytes (32-bit index + 64-bit value, Table I's
   buffer element), row pointers 4 bytes (two per fetched row / CSC column), partial matrices
   in the merger's COO format, 16 bytes (Table I: 64-bit index + 64-bit value), the final
   result in CSR (12 bytes per element + row pointers).
3. Within a round the multipliers consume the round's leaves row by row (Fig. 7's load
   order: for each row, its elements in the round's condensed columns); rounds run in the
   scheduler's order and the prefetch buffer keeps its contents across rounds.
4. Belady ties: lines whose next use is beyond the look-ahead window are evicted least
   recently used first; among lines equally far inside it, the highest line id.
5. Table III gives energy per FLOP measured on the paper's data set. Computation and SRAM stay
   per FLOP (2 per multiplication); the DRAM share is turned into 0.055 nJ/byte using the
   paper's own operating point (0.88 elements x 12 bytes of DRAM traffic per multiplication =
   5.3 bytes/FLOP for 0.29 nJ/FLOP), so traffic the techniques save shows up in the energy.
   Static power is not modelled.
6. The merged node size is counted structurally (coordinates any product reached); numerical
   cancellation does not shrink it, as the zero eliminator only removes folded duplicates.
7. Without pipelining (OuterSPACE's flow), a multiply phase writes every product to DRAM and
   the merge rounds read them back; the phases do not overlap.
"""

from __future__ import annotations

from distmm.sim.sparch.config import PREFETCH_POLICIES, SCHEDULERS, SpArchConfig
from distmm.sim.sparch.schedule import k_init, make_schedule
from distmm.sim.sparch.simulate import simulate

__all__ = ["PREFETCH_POLICIES", "SCHEDULERS", "SpArchConfig", "k_init",
           "make_schedule", "simulate"]
