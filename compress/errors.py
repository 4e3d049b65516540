"""The one exception type users see.

Every problem with the user's input (a model folder, a data file, an option) is raised as a
:class:`CompressError` whose message names the offending file or option and says how to fix it.
The command line prints the message alone (no traceback unless ``--debug``) and exits with code 2,
so a CI log shows the cause in one line.
"""

from __future__ import annotations


class CompressError(Exception):
    """A problem with the user's input or environment, explained for a person."""


class NonFiniteLossError(CompressError):
    """Training produced a NaN or infinite loss; carries the step and the loss terms."""
