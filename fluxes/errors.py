"""Exception types shared across fluxes.

Every error a user can cause derives from ``FluxesError`` so that the CLI
wrapper can turn it into a one-line message and a non-zero exit code.
"""

from __future__ import annotations


class FluxesError(Exception):
    """Base class for errors that are reported to the user as one line."""


class JobspecError(FluxesError, ValueError):
    """A jobspec is malformed; the message names the place, e.g. ``tasks[0].slot: ...``."""


class ConfigError(FluxesError, ValueError):
    """A configuration file or value is invalid; the message names the key."""


class PolicyError(FluxesError, ValueError):
    """A request breaks configured policy (queue, limits, access, urgency, dependency)."""
