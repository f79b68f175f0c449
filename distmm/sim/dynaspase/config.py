"""Parameters of the simulated Dynaspase accelerator (paper sections V-VII, Table V).

Defaults are the paper's Alveo U250 implementation: N_CC = 7 Computation Cores (section VII,
Figure 9), each with a p_sys x p_sys = 16 x 16 ALU array, clocked at 250 MHz, sharing 77 GB/s of
DDR bandwidth (Table V) and 45 MB of on-chip memory (Table V); eta = 4 tasks per core per kernel
for load balance (section VI-C).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

STRATEGIES = ("dynamic", "s1", "s2")
SPMM_COSTS = ("table", "rowwise")


@dataclass(frozen=True)
class DynaspaseConfig:
    """One accelerator configuration; every field is a constructor keyword of the node model.

    ``strategy`` picks the kernel-to-primitive mapping: ``dynamic`` (Algorithm 7, per block by
    density), ``s1`` (Aggregate on SpDMM with A sparse, Update on GEMM: HyGCN/BoostGCN) or
    ``s2`` (both on SpDMM, A resp. H viewed as sparse: AWB-GCN), section VIII-B.
    ``n1``/``n2`` fix the partition sizes (0: chosen by Algorithm 9). ``n_max`` caps a
    partition side (0: the largest that fits the double-buffered buffers of one core, g(S_o)
    of Algorithm 9). ``cache_operands``: a core keeps the blocks it has loaded when the whole
    operand fits in its share of on-chip memory (data locality, section VI-C objective 2).
    ``spmm_cost``: ``table`` charges an SPMM pair Table IV's a_X a_Y m n d / p cycles (its
    expectation for uniformly spread nonzeros); ``rowwise`` charges the pair's actual row-wise
    products (each nonzero X[r][c] times the nonzeros of Y's row c in the block), divided by
    p. Algorithm 7 decides by densities either way.
    """

    p_sys: int = 16
    n_cc: int = 7
    eta: int = 4
    freq_mhz: float = 250.0
    ddr_gbps: float = 77.0
    onchip_mb: float = 45.0
    value_bytes: int = 4
    index_bytes: int = 4
    mode_switch_cycles: int = 1
    strategy: str = "dynamic"
    n1: int = 0
    n2: int = 0
    n_max: int = 0
    cache_operands: bool = True
    spmm_cost: str = "table"

    def __post_init__(self) -> None:
        for name in ("p_sys", "n_cc", "eta", "value_bytes", "index_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.p_sys < 2:
            raise ValueError(f"p_sys must be at least 2 (SpDMM splits the array in two), "
                             f"got {self.p_sys}")
        for name in ("n1", "n2", "n_max", "mode_switch_cycles"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("freq_mhz", "ddr_gbps", "onchip_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, "
                             f"got {self.strategy!r}")
        if self.spmm_cost not in SPMM_COSTS:
            raise ValueError(f"spmm_cost must be one of {', '.join(SPMM_COSTS)}, got "
                             f"{self.spmm_cost!r}")
        if not isinstance(self.cache_operands, bool):
            raise ValueError(f"cache_operands must be true or false, got "
                             f"{self.cache_operands!r}")
        if self.n1 and self.n2 and self.n1 % self.n2:
            raise ValueError(f"n1 ({self.n1}) must be a multiple of n2 ({self.n2}): a fiber "
                             "is cut into N1/N2 subfibers (section IV-C)")

    @property
    def core_bytes(self) -> float:
        """On-chip memory of one Computation Core, bytes."""
        return self.onchip_mb * 1e6 / self.n_cc

    @property
    def bytes_per_cycle(self) -> float:
        """DDR bytes one core receives per cycle when all N_CC cores stream at once."""
        return self.ddr_gbps * 1e9 / (self.freq_mhz * 1e6) / self.n_cc

    @property
    def max_partition(self) -> int:
        """g(S_o) of Algorithm 9: the largest side N such that the double-buffered input
        buffers (BufferU/O/P) and Result Buffer of one core hold four dense N x N blocks,
        twice, in half of its on-chip memory (the other half caches operands)."""
        if self.n_max:
            return self.n_max
        n = int((self.core_bytes / 2 / (2 * 4 * self.value_bytes)) ** 0.5)
        return max(1, n)

    def with_strategy(self, strategy: str) -> DynaspaseConfig:
        """The same accelerator under another K2P strategy."""
        return DynaspaseConfig(**{**asdict(self), "strategy": strategy})

    def as_dict(self) -> dict:
        """The configuration as a JSON-ready dict."""
        return asdict(self)
