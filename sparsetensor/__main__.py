"""``python -m sparsetensor``: see :mod:`sparsetensor.cli`."""

import sys

from .cli import main

sys.exit(main())
