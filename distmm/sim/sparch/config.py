"""The SpArch configuration: Table I of the paper as defaults, every technique a switch.

Li et al., "SpArch: Efficient Architecture for Sparse Matrix Multiplication", HPCA 2020.
Table I gives the architecture, Table III the energy per FLOP; the byte sizes of the formats and
the latencies that the paper does not state are our assumptions (documented on each field and in
the package docstring).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

SCHEDULERS = ("huffman", "sequential", "random")
PREFETCH_POLICIES = ("belady", "lru", "none")


@dataclass(frozen=True)
class SpArchConfig:
    """Parameters of one SpArch chip (defaults: Table I) and the ablation switches (Fig. 16).

    Every field can be given as a keyword of :class:`SpArchModel`, in ``--node-config``'s JSON
    or in ``distmm simulate sparch --config``. Invalid values raise ValueError.
    """

    # --- Table I -------------------------------------------------------------------------
    clock_ghz: float = 1.0                 # "running under 1GHz clock frequency"
    merger_width: int = 16                 # 16 x 16 hierarchical comparator array: 16 elem/cycle
    merge_tree_layers: int = 6             # 6 layers -> 2**6 = 64-way merge tree
    multipliers: int = 16                  # 2 groups x 8 double-precision multipliers
    lookahead_fifo: int = 8192             # look-ahead FIFO of left-matrix elements
    prefetch_lines: int = 1024             # prefetch buffer: 1024 lines ...
    line_elements: int = 48                # ... x 48 elements ...
    element_bytes: int = 12                # ... x 12 bytes (32-bit column index + 64-bit value)
    dram_channels: int = 16                # 16 HBM channels ...
    channel_gbps: float = 8.0              # ... x 8 GB/s = 128 GB/s
    writer_fifo: int = 1024                # partial-matrix writer FIFO (elements)
    # --- format sizes the paper implies but does not state (assumptions) ----------------
    partial_element_bytes: int = 16        # merger format: 32-bit row + 32-bit col + 64-bit value
    pointer_bytes: int = 4                 # CSR row pointer entry
    # --- latencies the paper does not give (assumptions) --------------------------------
    dram_latency_cycles: int = 100         # first-access latency paid once per round
    layer_latency_cycles: int = 6          # comparator array + adder + log2(16) zero eliminator
    # --- Table III: SpArch energy per FLOP, DRAM per byte (derived, see energy docs) ----
    energy_compute_nj_per_flop: float = 0.26
    energy_sram_nj_per_flop: float = 0.34
    energy_dram_nj_per_byte: float = 0.055
    # --- the techniques of Fig. 16, each a switch ---------------------------------------
    pipeline: bool = True                  # multiply and merge pipelined (II-A)
    condense: bool = True                  # left matrix read by condensed columns (II-B)
    scheduler: str = "huffman"             # huffman (II-C) | sequential (Fig. 8) | random (III-C)
    prefetch: str = "belady"               # belady (II-D) | lru | none
    seed: int = 0                          # seed of the random scheduler

    def __post_init__(self) -> None:
        for name in ("merger_width", "merge_tree_layers", "multipliers", "line_elements",
                     "element_bytes", "dram_channels", "partial_element_bytes",
                     "pointer_bytes"):
            _positive_int(name, getattr(self, name))
        for name in ("lookahead_fifo", "prefetch_lines", "writer_fifo", "dram_latency_cycles",
                     "layer_latency_cycles", "seed"):
            _nonneg_int(name, getattr(self, name))
        for name in ("clock_ghz", "channel_gbps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        for name in ("energy_compute_nj_per_flop", "energy_sram_nj_per_flop",
                     "energy_dram_nj_per_byte"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{name} must be a non-negative number, got {v!r}")
        if self.merge_tree_layers > 20:
            raise ValueError(f"merge_tree_layers must be at most 20, got "
                             f"{self.merge_tree_layers}")
        for name in ("pipeline", "condense"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got "
                             f"{self.scheduler!r}")
        if self.prefetch not in PREFETCH_POLICIES:
            raise ValueError(f"prefetch must be one of {', '.join(PREFETCH_POLICIES)}, got "
                             f"{self.prefetch!r}")

    @property
    def merge_ways(self) -> int:
        """Partial matrices the merge tree merges at once: 2**layers (64 for Table I)."""
        return 2 ** self.merge_tree_layers

    @property
    def bytes_per_cycle(self) -> float:
        """DRAM bytes per clock cycle: channels x GB/s / GHz (128 for Table I)."""
        return self.dram_channels * self.channel_gbps / self.clock_ghz

    def replace(self, **changes) -> SpArchConfig:
        """A copy with some fields changed (validated again)."""
        return SpArchConfig(**{**asdict(self), **changes})

    def as_dict(self) -> dict:
        """All fields as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> SpArchConfig:
        """A config from a dict of fields; unknown keys raise ValueError."""
        if not isinstance(d, dict):
            raise ValueError(f"a SpArch config must be a JSON object, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown SpArch option(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(known))}")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str) -> SpArchConfig:
        """A config from a JSON file holding an object of fields."""
        with open(path) as fh:
            return cls.from_dict(json.load(fh))


def _positive_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _nonneg_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
