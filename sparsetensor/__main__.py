"""``python -m sparsetensor``: see :mod:`sparsetensor._cli._commands`."""

import sys

from ._cli import main

sys.exit(main())
