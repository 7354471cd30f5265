"""The applications: the ``sparsetensor`` command line (``_commands``: info, check, convert,
spy, bench and the default demo), the demo job (``_demo``) and the user benchmark
(``_userbench``). They sit at the top: nothing in the library imports them."""

from ._commands import main

__all__ = ["main"]
