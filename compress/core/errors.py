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


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of ``exc``'s message, cut to ``limit`` characters ("" for an empty message).

    Third-party errors (quantizers, exporters, converters) often carry a whole stack dump or
    graph listing in their message; a user-facing error or a report row quotes one line of it.
    """
    lines = str(exc).splitlines()
    return lines[0][:limit] if lines else ""


def describe(exc: BaseException, limit: int = 300) -> str:
    """``"TypeName: first line"``: how a caught third-party failure is recorded in a report."""
    return f"{type(exc).__name__}: {first_line(exc, limit)}"
