"""Job priority: the plugin interface, flux's default plugin, and urgency rules.

A job's *urgency* (0..31, default 16) is what its user asks for; its
*priority* (0..4294967295) is what the scheduler orders pending jobs by.  A
priority plugin turns one into the other.  Whatever the plugin says, two
urgencies are fixed, as in flux's job manager: 0 (*hold*) gives priority 0,
so the job is never scheduled, and 31 (*expedite*) gives the maximum
priority.  :func:`job_priority` applies that rule around any plugin.

flux's built-in ``priority-default`` plugin simply copies the urgency into
the priority; :class:`DefaultPriority` does the same, so with it priority 0
still means held and 31 becomes 4294967295 through the rule above.

:func:`check_urgency_change` holds the permission rules of ``flux job
urgency``, with flux's messages.  See ``docs/queues.md``.
"""

from __future__ import annotations

from typing import Final, NamedTuple, Protocol, runtime_checkable

from fluxes.errors import PolicyError
from fluxes.formats.urgency import (
    DEFAULT_URGENCY,
    MAX_URGENCY,
    MIN_URGENCY,
    URGENCY_EXPEDITE,
    URGENCY_HOLD,
)

__all__ = [
    "DEFAULT_URGENCY",
    "MAX_PRIORITY",
    "MAX_URGENCY",
    "MIN_PRIORITY",
    "MIN_URGENCY",
    "URGENCY_EXPEDITE",
    "URGENCY_HOLD",
    "DefaultPriority",
    "PriorityInput",
    "PriorityPlugin",
    "check_urgency_change",
    "job_priority",
    "needs_reprioritize_all",
    "parse_urgency",
]

MIN_PRIORITY: Final = 0
MAX_PRIORITY: Final = 4294967295  # 2**32 - 1


_URGENCY_WORDS: Final = {"hold": URGENCY_HOLD, "expedite": URGENCY_EXPEDITE,
                         "default": DEFAULT_URGENCY}


class PriorityInput(NamedTuple):
    """What a priority plugin may look at for one job."""

    jobid: int
    urgency: int
    userid: int
    t_submit: float
    queue: str | None = None


@runtime_checkable
class PriorityPlugin(Protocol):
    """Computes a job's priority from its urgency and whatever else it likes.

    A plugin may also define ``reprioritize_all() -> bool``, true when
    priorities drift with time (fair share, age) and the job manager should
    recompute every pending job's priority periodically; see
    :func:`needs_reprioritize_all`.
    """

    def priority(self, job: PriorityInput) -> int:
        """The priority of ``job``, in MIN_PRIORITY..MAX_PRIORITY."""
        ...


class DefaultPriority:
    """flux's default plugin: the priority is the urgency.

    Hold and expedite are applied around it by :func:`job_priority`.
    """

    name: Final = "default"

    def priority(self, job: PriorityInput) -> int:
        """The job's urgency."""
        return job.urgency

    def reprioritize_all(self) -> bool:
        """Urgency only changes through events, so periodic recomputation is never needed."""
        return False


def needs_reprioritize_all(plugin: PriorityPlugin) -> bool:
    """True if ``plugin`` defines ``reprioritize_all()`` and it returns true."""
    method = getattr(plugin, "reprioritize_all", None)
    return bool(method()) if callable(method) else False


def _check_urgency(urgency: object) -> int:
    if isinstance(urgency, bool) or not isinstance(urgency, int):
        raise PolicyError(f"urgency must be an integer, not {type(urgency).__name__}")
    if not MIN_URGENCY <= urgency <= MAX_URGENCY:
        raise PolicyError("urgency value is out of range")
    return urgency


def job_priority(plugin: PriorityPlugin, job: PriorityInput) -> int:
    """The priority ``plugin`` gives ``job``, with hold (0) and expedite (31) forced.

    As in flux the override happens here, outside the plugin, so no plugin
    can schedule a held job or hold back an expedited one.  Raises
    PolicyError if the urgency is out of range or the plugin returns
    something other than an integer in MIN_PRIORITY..MAX_PRIORITY.
    """
    urgency = _check_urgency(job.urgency)
    if urgency == URGENCY_HOLD:
        return MIN_PRIORITY
    if urgency == URGENCY_EXPEDITE:
        return MAX_PRIORITY
    value = plugin.priority(job)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(
            f"priority plugin returned {type(value).__name__}, not an integer"
        )
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise PolicyError(
            f"priority plugin returned {value}, outside {MIN_PRIORITY}..{MAX_PRIORITY}"
        )
    return value


def parse_urgency(text: str) -> int:
    """Read an urgency as ``flux job urgency`` does: 0..31, hold, expedite or default."""
    if not isinstance(text, str):
        raise PolicyError(f"urgency must be a string, not {type(text).__name__}")
    word = _URGENCY_WORDS.get(text.lower())
    if word is not None:
        return word
    if not text.isascii() or not text.isdigit():
        raise PolicyError(
            f"invalid urgency {text[:20]!r}: expected 0-31, hold, expedite or default"
        )
    if len(text) > 3:
        raise PolicyError("urgency value is out of range")
    return _check_urgency(int(text))


def check_urgency_change(
    new_urgency: int,
    requester_userid: int,
    owner_userid: int,
    is_owner_instance: bool,
    *,
    current_urgency: int = DEFAULT_URGENCY,
    has_resources: bool = False,
) -> None:
    """Raise PolicyError if the requester may not set the job's urgency to ``new_urgency``.

    ``owner_userid`` owns the job; ``is_owner_instance`` says the requester
    is the instance owner, who may do anything.  Others may change only
    their own jobs, and only to at most the default urgency or the job's
    ``current_urgency``, whichever is higher (so a guest can never expedite,
    but can lower and then restore an urgency the owner raised).  Nobody may
    change it once the job holds resources.  The messages are flux's.
    """
    urgency = _check_urgency(new_urgency)
    if not is_owner_instance and requester_userid != owner_userid:
        raise PolicyError("guests can only reprioritize their own jobs")
    if not is_owner_instance and urgency > max(DEFAULT_URGENCY, current_urgency):
        raise PolicyError("guests can only adjust urgency <= default")
    if has_resources:
        raise PolicyError("urgency cannot be changed once resources are allocated")
