"""When a layer of the sparsity-aware exchange keeps its relay tree, and the ``relay=`` option.

The relay (:func:`distmm.core.exchange.relay_parents`) sends a row needed by many ranks of a
layer to some of them, which forward it to the others in a second phase. It lowers the busiest
rank's rows sent (``before`` -> ``after`` per exchange) at the price of that second phase: one
more round of messages on the critical path (``extra`` messages from the busiest relay). In the
alpha-beta model of the planner (:class:`distmm.perf.planner.Machine`: alpha seconds per
message, beta per word) one exchange of width r gains

    (before - after) * r * beta - extra * alpha

seconds, so with calibrated constants (``distmm calibrate``) and a known width the tree is kept
where that is positive. Without them, a fixed fraction stands in: the tree is kept where it
lowers the busiest rank's rows by :data:`RELAY_MIN_SAVING` or more.

The rule is applied where the tree is built: on each layer's rank 0 at distribute, which sends
every rank of the layer the outcome (so the decision is the same everywhere), and by the
planner's model (:func:`distmm.core.exchange.exchange_model`) on the same pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distmm.errors import InputError

# The fraction of the busiest rank's rows sent a tree must save where no calibration is known:
# its second phase costs one more round of messages on the critical path, which a small saving
# in words does not repay (a few percent of the rows at p = 4 made FusedMM slower).
RELAY_MIN_SAVING = 0.25

RELAY_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class RelayRule:
    """Whether a layer keeps its relay tree (see the module docstring). Not collective.

    ``min_saving``: the fraction rule's threshold (``"on"``: 0, any tree that lowers the
    busiest rank's rows). ``alpha`` (s per message), ``beta`` (s per word) and ``r`` (the
    dense width): where all three are given, the modelled time decides instead."""

    min_saving: float = RELAY_MIN_SAVING
    alpha: float | None = None
    beta: float | None = None
    r: int | None = None

    @property
    def timed(self) -> bool:
        """Whether the modelled time decides (calibrated alpha and beta and a width)."""
        return None not in (self.alpha, self.beta, self.r)

    def keeps(self, before: int, after: int, extra: int) -> bool:
        """Whether a tree that takes the busiest rank's rows sent from ``before`` to ``after``
        with ``extra`` more messages from the busiest relay in its second phase is kept."""
        if after > before or (after == before and self.timed):
            return False
        if self.timed:
            return (before - after) * self.r * self.beta > extra * self.alpha
        return after <= (1.0 - self.min_saving) * before

    def describe(self) -> str:
        """For reports: the rule in words."""
        if self.timed:
            return f"modelled time (alpha {self.alpha:.3g} s, beta {self.beta:.3g} s, r {self.r})"
        return f"saves at least {self.min_saving:.0%} of the busiest rank's rows"


def relay_rule(relay, machine=None, r: int | None = None) -> RelayRule | bool:
    """The relay setting a family gets from ``relay=`` (distribute's option, the command
    line's ``--relay``): False for ``"off"``/False; a :class:`RelayRule` otherwise:
    ``"on"`` keeps any tree that lowers the busiest rank's rows, ``"auto"``/True/None (the
    default) the rule of the module docstring, by modelled time where ``machine`` is a
    calibrated :class:`~distmm.perf.planner.Machine` (not the built-in defaults) and ``r``
    is known, else by :data:`RELAY_MIN_SAVING`. A :class:`RelayRule` is returned as given.
    InputError for anything else. Not collective."""
    if isinstance(relay, RelayRule):
        return relay
    if relay is None or relay is True:
        relay = "auto"
    if relay is False:
        relay = "off"
    if not isinstance(relay, str) or relay not in RELAY_CHOICES:
        raise InputError(f"relay must be one of {', '.join(RELAY_CHOICES)} (or a bool), "
                         f"got {relay!r}")
    if relay == "off":
        return False
    if relay == "on":
        return RelayRule(min_saving=0.0)
    calibrated = machine is not None and getattr(machine, "source", "defaults") != "defaults"
    if calibrated and r is not None and _usable(machine.alpha) and _usable(machine.beta):
        return RelayRule(alpha=float(machine.alpha), beta=float(machine.beta), r=int(r))
    return RelayRule()


def _usable(x) -> bool:
    return x is not None and math.isfinite(float(x)) and float(x) > 0


def relay_name(relay) -> str:
    """``relay`` (any value :func:`relay_rule` takes, or its result) as printable text, for
    the cross-rank agreement of distribute's settings and for reports."""
    rule = relay_rule(relay)
    if rule is False:
        return "off"
    if rule.min_saving == 0.0 and not rule.timed:
        return "on"
    return "auto: " + rule.describe()


__all__ = ["RELAY_CHOICES", "RELAY_MIN_SAVING", "RelayRule", "relay_name", "relay_rule"]
