"""``python -m distmm.cli``: the ``distmm`` command."""

import sys

from distmm.cli.main import main

sys.exit(main())
