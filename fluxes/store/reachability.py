"""This process's record of when Redis answered it (``fluxes.domain.liveness``).

One :class:`~fluxes.domain.liveness.AnswerClock` per process: the worker loop
(every round, every stall-like error), the leases and the liveness judges feed
it with the moments Redis answered; a judge notes the answer it judges on
(:func:`judge`) and is told whether it may judge. Stall-like errors are those a stall of the server
gives, whatever the command: a lost or refused connection, a time-out, and the
error replies of a server that is busy, loading or refusing writes.
"""

from __future__ import annotations

import time

import redis

from fluxes.domain.liveness import AnswerClock

#: Error replies of a server that cannot do the work now, whatever the command:
#: a script running past ``busy-reply-threshold`` (BUSY), loading its data
#: (LOADING), refusing writes (OOM: ``maxmemory`` reached; MISCONF: a failed
#: AOF/RDB write), a replica or a cluster not ready, or asking again for a
#: password (a Redis restarted with another one: NOAUTH, WRONGPASS). They say
#: nothing about the input being handled: the worker waits and retries.
STALL_REPLIES = ("BUSY", "LOADING", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN",
                 "OOM", "MISCONF", "NOREPLICAS", "UNBLOCKED", "NOAUTH", "WRONGPASS")

#: The answer clock of this process.
CLOCK = AnswerClock()


#: What redis-py puts before the error of a command in a pipeline.
_PIPELINE_NOTE = " of pipeline caused error: "


def reply_text(exc: BaseException) -> str:
    """The server's error reply in ``exc`` (without the note a pipeline adds)."""
    text = str(exc)
    if text.startswith("Command # ") and _PIPELINE_NOTE in text:
        return text.split(_PIPELINE_NOTE, 1)[1]
    return text


#: redis-py's error classes that stand for a reply code (and drop it from the text).
_CODED: tuple[tuple[type[redis.RedisError], str], ...] = (
    (redis.exceptions.OutOfMemoryError, "OOM"), (redis.exceptions.ReadOnlyError, "READONLY"),
    (redis.exceptions.TryAgainError, "TRYAGAIN"), (redis.exceptions.BusyLoadingError, "LOADING"),
    (redis.exceptions.ClusterDownError, "CLUSTERDOWN"),
    (redis.exceptions.MasterDownError, "MASTERDOWN"),
    (redis.exceptions.AuthenticationError, "WRONGPASS"))


def reply_code(exc: BaseException) -> str:
    """The code of the server's error reply in ``exc`` (``OOM``, ``BUSY``...), or ""."""
    for cls, code in _CODED:
        if isinstance(exc, cls):
            return code
    if not isinstance(exc, redis.ResponseError):
        return ""
    return reply_text(exc).split(" ", 1)[0]


def is_stall(exc: BaseException) -> bool:
    """True for an error a stalled, restarting or full server gives (see STALL_REPLIES)."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return True
    return isinstance(exc, redis.ResponseError) and reply_code(exc) in STALL_REPLIES


def answered() -> None:
    """Record that Redis answered this process now."""
    CLOCK.answered(time.monotonic())


def unanswered() -> None:
    """Record that Redis did not answer this process now."""
    CLOCK.unanswered(time.monotonic())


def may_judge(limit_s: float) -> bool:
    """Right after an answer of Redis: True when this process may declare something
    silent for ``limit_s`` stale (it noted the answer first)."""
    now = time.monotonic()
    CLOCK.answered(now)
    return CLOCK.may_judge(now, limit_s)


def explain(exc: BaseException) -> str:
    """One line saying why Redis does not do what was asked (for a worker's log, or a
    command's error message)."""
    text = reply_text(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    code = reply_code(exc)
    if code in ("WRONGPASS", "NOAUTH"):
        return (f"Redis refused the password ({text}): was it restarted with another "
                "password?")
    if code == "OOM":
        return (f"Redis is full (maxmemory reached) and refuses writes until memory is "
                f"freed; nothing was written ({text})")
    if code == "MISCONF":
        return (f"Redis cannot save its data to disk (disk full?) and refuses writes; "
                f"nothing was written ({text})")
    if code == "BUSY":
        return f"Redis is busy running a script and answers nobody ({text})"
    if code == "LOADING":
        return "Redis is loading its data set after a restart"
    return f"Redis unavailable: {text}"


def kill_runaway(client: redis.Redis) -> bool:
    """``SCRIPT KILL``: end an EVAL script that keeps Redis busy (never one of ours: our
    steps are functions, which this cannot kill, and an instance owner's function is
    the owner's business). True when one was killed; a script that already wrote
    cannot be (Redis would lose atomicity), nor can an identity without the right."""
    try:
        client.execute_command("SCRIPT", "KILL")
    except redis.RedisError:
        return False  # NOTBUSY, UNKILLABLE, a function running, NOPERM, gone
    return True
