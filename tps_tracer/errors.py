"""The one error base class of the package: bad input versus a bug.

`InputError` is raised wherever tps-tracer checks what a caller gave it (records, options, forecasts,
settings) and finds it invalid. Every error class of the package that reports bad input subclasses it,
so the command line maps exit codes by class: an `InputError` is exit 2 ("bad input", one line naming
what and where); any other exception, including a plain `ValueError` from numpy or the standard library
inside a command, is exit 3 ("internal error, please report it"), never mistaken for the user's fault.

It subclasses `ValueError` so code that caught `ValueError` from the library keeps working.
"""

from __future__ import annotations


class InputError(ValueError):
    """Invalid input to tps-tracer: records, options, forecasts or settings (the CLI exits 2)."""
