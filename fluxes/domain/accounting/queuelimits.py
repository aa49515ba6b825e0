"""Per-queue limits of accounting's queues (flux-accounting's ``add-queue`` /
``edit-queue`` options), pure.

A queue added with ``fluxes account add-queue`` may carry, besides its priority:

* ``min_nodes_per_job`` and ``max_nodes_per_job``: a job for the queue asking for
  fewer or more nodes is refused at submission (a job that names no node count
  counts as one node);
* ``max_time_per_job`` (seconds): a job for the queue with a longer time limit, or
  none, is refused at submission;
* ``max_running_jobs``: how many of an association's jobs in the queue may run at
  once; the scheduler holds back the next one with the reason
  :func:`running_refusal` gives, as the association's own limits do.

``None`` is no limit (the default: fluxes's own queues, ``[queues.NAME]``, carry node
and time limits of their own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from fluxes.errors import PolicyError

#: The queue limit names, as the options spell them (``--max-nodes-per-job``...).
QUEUE_LIMIT_NAMES: Final = ("min_nodes_per_job", "max_nodes_per_job", "max_time_per_job",
                            "max_running_jobs")
#: Largest value of a limit (as a bank's limits).
_MAX: Final = 2**31 - 1


class QueueLimits(NamedTuple):
    """A queue's limits (None: no limit)."""

    min_nodes_per_job: int | None = None
    max_nodes_per_job: int | None = None
    max_time_per_job: int | None = None
    max_running_jobs: int | None = None

    def changed(self, changes: Mapping[str, int | None]) -> QueueLimits:
        """These limits with ``changes`` (name -> value, None: no limit) applied."""
        return self._replace(**dict(changes))

    def to_dict(self) -> dict[str, int | None]:
        """JSON-ready form."""
        return self._asdict()


NO_QUEUE_LIMITS: Final = QueueLimits()


def check_queue_limit_changes(changes: object) -> dict[str, int | None]:
    """``changes`` as a dict of queue limit name -> value or None; PolicyError (the
    caller's AccountError base) naming what is wrong."""
    if not isinstance(changes, Mapping):
        raise PolicyError(f"queue_limits: expected an object, got {str(changes)[:40]!r}")
    out: dict[str, int | None] = {}
    for name, value in changes.items():
        if name not in QUEUE_LIMIT_NAMES:
            raise PolicyError(f"queue_limits: unknown limit {str(name)[:40]!r} "
                              f"(known: {', '.join(QUEUE_LIMIT_NAMES)})")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 0 <= value <= _MAX):
            raise PolicyError(f"{name.replace('_', '-')}: expected an integer 0-{_MAX}, "
                              f"got {str(value)[:40]!r}")
        out[name] = value
    return out


def submit_refusal(queue: str, limits: QueueLimits, nnodes: int,
                   duration: float) -> str | None:
    """Why a job for ``queue`` asking for ``nnodes`` nodes (0: unspecified, one) and a
    time limit of ``duration`` seconds (0: none) may never run there; None: it may."""
    nodes = max(nnodes, 1)
    if limits.min_nodes_per_job is not None and nodes < limits.min_nodes_per_job:
        return (f"the job requests {nodes} nodes, fewer than the min-nodes-per-job "
                f"({limits.min_nodes_per_job}) of queue {queue}")
    if limits.max_nodes_per_job is not None and nodes > limits.max_nodes_per_job:
        return (f"the job requests {nodes} nodes, more than the max-nodes-per-job "
                f"({limits.max_nodes_per_job}) of queue {queue}")
    if limits.max_time_per_job is not None and (
            duration <= 0 or duration > limits.max_time_per_job):
        asked = f"a time limit of {duration:g}s" if duration > 0 else "no time limit"
        return (f"the job has {asked}, over the max-time-per-job "
                f"({limits.max_time_per_job}s) of queue {queue}")
    return None


def running_refusal(queue: str, limits: QueueLimits, running: int, who: str) -> str | None:
    """Why another job of ``who`` (an association's label) in ``queue``, where it runs
    ``running`` jobs, may not start now; None: it may."""
    if limits.max_running_jobs is not None and running + 1 > limits.max_running_jobs:
        return (f"max-running-jobs limit ({limits.max_running_jobs}) of queue {queue} "
                f"reached for {who}")
    return None
