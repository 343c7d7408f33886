"""User-facing errors.

A :class:`UserError` is a problem the user can fix (bad config, missing file, wrong k/h ...). The CLI prints its
message as one line (``error: ...``) and exits with status 2 -- no traceback. Everything else is a bug and keeps its
traceback. ``UserError`` subclasses ``ValueError`` so library callers can catch it the usual way.
"""

from __future__ import annotations


class UserError(ValueError):
    """A problem with the user's input; the message names the problem and the fix."""


class ConfigError(UserError):
    """An invalid configuration value or key."""
