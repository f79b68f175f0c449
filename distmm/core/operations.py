"""The five operations' names: the one place that maps the command line's to Python's.

In Python an operation is named as the method of a distributed matrix that runs it
(``S.fusedmm_a``); the command line spells the same name with hyphens (``distmm run
fusedmm-a``). Everything that takes an operation by name (``S.bind``, the memory model, the
planner, the command line) goes through :func:`op_name`, so either spelling is accepted and
the Python one is used inside.
"""

from __future__ import annotations

from distmm.errors import InputError

# The operations in Python spelling: the methods of a distributed matrix.
OPS = ("sddmm", "spmm_a", "spmm_b", "fusedmm_a", "fusedmm_b")


def op_name(text: str) -> str:
    """The Python name of an operation given in either spelling (``"fusedmm-a"`` or
    ``"fusedmm_a"``). Not collective.

    Raises
    ------
    InputError
        For anything that names no operation, listing the operations.
    """
    name = text.replace("-", "_") if isinstance(text, str) else None
    if name not in OPS:
        raise InputError(f"unknown operation {text!r}; choose one of {', '.join(OPS)} "
                         f"(on the command line {', '.join(OPS).replace('_', '-')})")
    return name


def cli_name(op: str) -> str:
    """The command line's spelling of operation ``op`` (either spelling). Not collective."""
    return op_name(op).replace("_", "-")


# The operations as the command line spells them.
CLI_OPS = tuple(cli_name(op) for op in OPS)


__all__ = ["CLI_OPS", "OPS", "cli_name", "op_name"]
