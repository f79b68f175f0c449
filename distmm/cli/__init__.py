"""The ``distmm`` command line (the console script ``distmm`` and ``python -m distmm`` run
:func:`main` through :mod:`distmm.__main__`, which prepares the process first).

One module per command or group: :mod:`~distmm.cli.kernels` (run, bench),
:mod:`~distmm.cli.plan` (plan, calibrate), :mod:`~distmm.cli.spgemm`,
:mod:`~distmm.cli.simulate` (with :mod:`~distmm.cli.dynaspase`), :mod:`~distmm.cli.als`,
:mod:`~distmm.cli.gat`, :mod:`~distmm.cli.convert`; ``info`` lives in
:mod:`distmm.runtime.info`. Their
shared pieces are public in :mod:`distmm.cli.common` (options, output, node model, memory
limit) and :mod:`distmm.cli.files` (the input/output layer every command goes through);
:mod:`distmm.cli.entry` parses, agrees, checks the files and dispatches.
"""

from __future__ import annotations

from distmm.cli.entry import build_parser, main

__all__ = ["build_parser", "main"]
