"""``fluxes exec``: commands the instance owner runs on exec ranks (flux exec).

A :class:`~fluxes.messages.Command` on a rank's request stream is run by
that rank's exec worker, as the instance owner (a root worker drops to the
owner's uid unless the owner is root), stdin ``/dev/null``, stdout and
stderr to files under ``<state>/commands``; once it ended, what it wrote (at
most :data:`MAX_OUTPUT` bytes a stream) and its wait status go to the reply
stream of its token as one entry per rank (:func:`reply_fields`), which the
command line reads.  Output comes when the command ends, not line by line.
A command redelivered after a worker restart is not run again: its reply
says so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass

import orjson

from fluxes.messages import Command

#: Bytes of each of stdout/stderr a rank sends back.
MAX_OUTPUT = 1 << 20
#: How long a reply stream lives after its last entry (seconds).
REPLY_TTL_S = 300
#: The wait status said for a command that could not run (as a shell's 127).
NOT_RUN = 127 << 8


@dataclass(slots=True)
class Running:
    """One command running on a rank."""

    rank: int
    token: str
    popen: subprocess.Popen[bytes] | None
    out: str
    err: str
    error: str = ""


def reply_fields(rank: int, status: int, out: bytes, err: bytes, error: str = "") -> dict[
        bytes, bytes]:
    """The reply stream entry of one rank."""
    return {b"d": orjson.dumps({"rank": rank, "status": status, "error": error}),
            b"out": out, b"err": err}


def decode_reply(fields: dict[bytes, bytes]) -> tuple[int, int, bytes, bytes, str]:
    """(rank, wait status, stdout, stderr, error) of a reply entry; ValueError if bad."""
    try:
        head = orjson.loads(fields[b"d"])
        return (int(head["rank"]), int(head["status"]), fields.get(b"out", b""),
                fields.get(b"err", b""), str(head.get("error") or ""))
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError):
        raise ValueError("malformed fluxes exec reply") from None


class CommandRunner:
    """The commands this worker runs; :meth:`poll` gives back those that ended."""

    def __init__(self, state_dir: str) -> None:
        self.dir = os.path.join(state_dir, "commands")
        self.running: list[Running] = []

    def start(self, rank: int, cmd: Command, user: int | None) -> Running:
        """Run ``cmd`` (as ``user`` when given: a root worker and another owner)."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        base = os.path.join(self.dir, f"{cmd.token}.{rank}")
        run = Running(rank, cmd.token, None, base + ".out", base + ".err")
        env = dict(cmd.env) if cmd.env is not None else {
            k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER", "LANG")}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env["FLUXES_EXEC_RANK"] = str(rank)
        try:
            with open(run.out, "wb") as out, open(run.err, "wb") as err:
                if user is not None:
                    os.fchown(out.fileno(), user, -1)
                    os.fchown(err.fileno(), user, -1)
                run.popen = subprocess.Popen(  # the instance owner's own command
                    cmd.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                    cwd=cmd.cwd if os.path.isdir(cmd.cwd) else "/", close_fds=True,
                    start_new_session=True, user=user)
        except (OSError, subprocess.SubprocessError) as exc:
            run.error = f"{cmd.argv[0]}: {getattr(exc, 'strerror', None) or exc}"
        self.running.append(run)
        return run

    def poll(self) -> list[tuple[Running, int, bytes, bytes]]:
        """(run, wait status, stdout, stderr) of the commands that ended; their files go."""
        done = []
        for run in list(self.running):
            status = NOT_RUN
            if run.popen is not None:
                code = run.popen.poll()
                if code is None:
                    continue
                status = (code << 8) if code >= 0 else -code
            self.running.remove(run)
            done.append((run, status, _read(run.out), _read(run.err)))
        return done


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as src:
            data = src.read(MAX_OUTPUT + 1)
    except OSError:
        return b""
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if len(data) > MAX_OUTPUT:
        data = data[:MAX_OUTPUT] + b"\n[fluxes exec: output truncated]\n"
    return data
