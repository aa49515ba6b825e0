"""Job prolog, epilog and housekeeping on an exec rank: their configuration and rules.

``[exec]`` keys (docs/exec.md, "Prolog, epilog, housekeeping"):

* ``prolog``, ``epilog``, ``housekeeping``: a command, as a string (run by
  ``/bin/sh -c``) or a list of arguments;
* ``prolog-timeout`` (default 30m, as flux), ``epilog-timeout`` and
  ``housekeeping-timeout`` (default none): RFC 23 durations, 0 for none.

A rank runs the prolog before the job's first task starts there, the epilog
after its last task ended (the rank is reported released once it ended), then
housekeeping, while a drain holds the rank out of the scheduler's reach.  A
failing prolog fails the job and drains the rank; a failing epilog or
housekeeping drains it.  Pure: the runner is :mod:`fluxes.proc.perilog`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from fluxes.formats import fsd
from fluxes.formats import jobid as _jobid

__all__ = ["HOUSEKEEPING_REASON", "KEYS", "PHASES", "Hook", "PerilogConfig", "drain_reason",
           "failure_text", "housekeeping_reason"]

#: The phases, in the order they run around a job.
PHASES: Final = ("prolog", "epilog", "housekeeping")
#: The ``[exec]`` keys this module reads.
KEYS: Final = frozenset(PHASES) | {f"{p}-timeout" for p in PHASES}
#: The drain reason of a rank held by housekeeping starts with this (``fluxes resource
#: status`` shows such a rank as ``housekeeping``).
HOUSEKEEPING_REASON: Final = "housekeeping for job "
_DEFAULT_TIMEOUT: Final = {"prolog": 1800.0, "epilog": 0.0, "housekeeping": 0.0}


@dataclass(frozen=True, slots=True)
class Hook:
    """One configured command: its argv and timeout (0: none)."""

    argv: tuple[str, ...]
    timeout: float


def _argv(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"exec.{name}: empty command")
        return ("/bin/sh", "-c", value)
    if isinstance(value, list) and value and all(isinstance(a, str) for a in value):
        return tuple(value)
    raise ValueError(f"exec.{name}: expected a command string or a list of strings")


@dataclass(frozen=True, slots=True)
class PerilogConfig:
    """The configured hooks (None when not configured)."""

    prolog: Hook | None = None
    epilog: Hook | None = None
    housekeeping: Hook | None = None

    @classmethod
    def from_table(cls, table: Mapping[str, Any]) -> PerilogConfig:
        """From the ``[exec]`` table; ValueError naming a bad key."""
        hooks: dict[str, Hook] = {}
        for phase in PHASES:
            timeout = _DEFAULT_TIMEOUT[phase]
            raw_timeout = table.get(f"{phase}-timeout")
            if raw_timeout is not None:
                try:
                    timeout = fsd.parse_duration(raw_timeout)
                except ValueError as exc:
                    raise ValueError(f"exec.{phase}-timeout: {exc}") from None
            if timeout == float("inf"):
                timeout = 0.0
            if phase in table:
                hooks[phase] = Hook(_argv(phase, table[phase]), timeout)
        return cls(**hooks)

    def get(self, phase: str) -> Hook | None:
        """The hook of ``phase``."""
        hook: Hook | None = getattr(self, phase)
        return hook

    @property
    def after_job(self) -> bool:
        """True when something runs after a job (its release waits for it)."""
        return self.epilog is not None or self.housekeeping is not None

    def __bool__(self) -> bool:
        return any(self.get(p) is not None for p in PHASES)


def hook_environment(base: Mapping[str, str], jobid: int, owner: int, rank: int,
                     phase: str) -> dict[str, str]:
    """A hook's environment: the worker's base, the job's id and owner, the rank."""
    env = dict(base)
    env.update({"FLUXES_JOB_ID": _jobid.encode(jobid, "f58"), "FLUXES_JOB_ID_DEC": str(jobid),
                "FLUXES_JOB_USERID": str(owner), "FLUXES_EXEC_RANK": str(rank),
                "FLUXES_HOOK": phase})
    return env


def failure_text(phase: str, status: int | None, timed_out: bool, host: str,
                 rank: int) -> str:
    """How a hook failed, as flux words it (``prolog exited with code=1 on HOST (rank R)``)."""
    if timed_out:
        return f"{phase} timed out on {host} (rank {rank})"
    if status is None:
        return f"{phase} was lost (its exec worker restarted) on {host} (rank {rank})"
    if os.WIFSIGNALED(status):
        return f"{phase} killed by signal {os.WTERMSIG(status)} on {host} (rank {rank})"
    code = os.WEXITSTATUS(status)
    if code > 128:
        return f"{phase} killed by signal {code - 128} on {host} (rank {rank})"
    return f"{phase} exited with code={code} on {host} (rank {rank})"


def drain_reason(phase: str, timed_out: bool, jobid: int) -> str:
    """The drain reason of a failed hook (flux: ``prolog failed for job ƒX``)."""
    what = "timed out" if timed_out else "failed"
    return f"{phase} {what} for job {_jobid.encode(jobid, 'f58')}"


def housekeeping_reason(jobid: int) -> str:
    """The reason of the drain that holds a rank while the job's housekeeping runs."""
    return f"{HOUSEKEEPING_REASON}{_jobid.encode(jobid, 'f58')}"
