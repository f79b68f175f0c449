"""``python -m distmm.cli``: the ``distmm`` command."""

import sys

from distmm.cli.entry import main

sys.exit(main())
