"""The one exception type for bad input.

Everything a user can get wrong (a flag, a preset, a data file, a missing optional stack)
raises :class:`UserError` with one line that names the input and the fix. The command-line
entry points print exactly that line and exit non-zero; any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input: the message names the input, the value and what to do instead."""


class NonFiniteWeights(UserError):
    """An optimiser step left a weight inf or NaN; the run stops before it can be checkpointed."""
