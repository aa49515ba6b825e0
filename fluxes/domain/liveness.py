"""Riding out a Redis that stops answering, pure: the retry backoff, and the clock that
liveness judgements use (docs/operations.md, "When Redis stalls or refuses").

A Redis that is busy (a long script), loading, refusing writes (OOM, MISCONF) or
unreachable is not a dead worker: every worker waits for it and retries. The
danger is afterwards: a stall of 30 s leaves every lease and heartbeat 30 s
old, and a judge that compares wall-clock ages would declare every leader and
every exec worker dead at the same moment. So liveness is judged on *answered
time*:

    A judge (a standby taking a free lease, the scheduler declaring an exec
    rank lost, a job manager declaring its scheduler gone) declares something
    silent for the limit L stale only if, during the last L seconds, Redis
    never left the judge itself without an answer for more than a third of L.
    "Without an answer" is the time between two answers the judge's process
    got (any Redis call, any round of its loop), or a stall-like error (busy,
    loading, refused write, lost connection, time-out).

Every process is a judge of its own: after a stall each one waits a full limit
of answered time, during which every live leader renews its lease and every
exec worker heart-beats again. Something that stops while Redis answers its
judge (a dead or partitioned worker) is still judged in time. Shorter
silences change nothing: a leader renews at a fifth of its lease's TTL and an
exec worker beats every second, so a silence of L/3 cannot make them look
silent for L.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

#: The share of a staleness limit that the judge's own wait for Redis may last
#: in the last limit before judging waits (see the module docstring).
SILENCE_SHARE = 1 / 3
#: Waits between answers shorter than this are not remembered (they are harmless
#: for every limit in use, and most rounds are this short).
MIN_SILENCE_S = 1.0
#: Silences remembered (the newest).
SILENCES_KEPT = 64


@dataclass(slots=True)
class AnswerClock:
    """When this process waited for Redis (monotonic seconds).

    ``answered(now)`` after every answer worth noting (a loop round, a lease
    call, a judge's read); ``unanswered(now)`` on every stall-like error.
    """

    last_answer: float = -math.inf
    #: (end, length) of the recent silences, oldest first
    silences: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=SILENCES_KEPT))

    def answered(self, now: float) -> None:
        """Redis answered at ``now``; a long wait since the previous answer was a silence."""
        if now - self.last_answer >= MIN_SILENCE_S and self.last_answer > -math.inf:
            self.silences.append((now, now - self.last_answer))
        self.last_answer = max(self.last_answer, now)

    def unanswered(self, now: float) -> None:
        """Redis did not answer at ``now`` (an error of a stall, or a lost connection)."""
        self.silences.append((now, math.inf))

    def may_judge(self, now: float, limit_s: float) -> bool:
        """True when something silent for ``limit_s`` may be declared stale at ``now``."""
        if now - self.last_answer > limit_s * SILENCE_SHARE:
            return False  # waiting for Redis right now (the judge's own call was slow)
        return not any(now - end < limit_s and length > limit_s * SILENCE_SHARE
                       for end, length in self.silences)


@dataclass(slots=True)
class Backoff:
    """Waits between retries: ``first`` doubling up to ``most`` seconds; ``reset()`` on
    success. Also says when an episode of failures starts (log it once) and ends."""

    first: float = 0.05
    most: float = 2.0
    _next: float = 0.0
    failures: int = 0
    since: float | None = None

    def failed(self, now: float) -> float:
        """One more failure at ``now``: the seconds to wait before the next try."""
        if self.since is None:
            self.since = now
        self.failures += 1
        delay = self.first if self._next == 0 else self._next
        self._next = min(delay * 2, self.most)
        return delay

    @property
    def first_failure(self) -> bool:
        """True right after the first failure of an episode (the one to log)."""
        return self.failures == 1

    def succeeded(self, now: float) -> float | None:
        """A success at ``now``: the episode's length in seconds if one just ended, else None."""
        if self.since is None:
            return None
        lasted = now - self.since
        self.since = None
        self.failures = 0
        self._next = 0.0
        return lasted
