"""The Redis faults ``fluxes drill --fault`` puts a private instance through, each begun
and ended on the instance owner's own connection (docs/operations.md, "When Redis
stalls or refuses"):

* ``stall``: a busy function keeps Redis from answering anyone (a runaway step,
  a slow disk): others wait, then get ``BUSY``;
* ``oom``: ``maxmemory`` reached (set to 1 byte): writes refused with ``OOM``;
* ``misconf``: a snapshot that cannot be written (its file is a directory, so
  ``BGSAVE`` fails) with ``stop-writes-on-bgsave-error``: writes refused with
  ``MISCONF``, as with a full disk;
* ``password``: the default user's password changed and every connection
  dropped, as after a restart with another password: ``NOAUTH``/``WRONGPASS``.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from pathlib import Path

from fluxes.errors import FluxesError
from fluxes.store.errors import Client as Connection

#: The busy step: a function of the drill's own (a test-side library the instance owner
#: loads) that spins until Redis's own clock has moved ARGV[1] seconds on. A function,
#: not an EVAL script, because workers SCRIPT KILL a runaway script that is not ours:
#: this stands for a stall nobody can end (a long step of ours, a slow disk).
STALL_LIBRARY = (
    "#!lua name=fluxes_drill_stall\n"
    "local function now() local t = redis.call('TIME') "
    "return tonumber(t[1]) + tonumber(t[2]) / 1e6 end\n"
    "redis.register_function{function_name='fluxes_drill_stall', "
    "callback=function(keys, args) local stop = now() + tonumber(args[1]) "
    "while now() < stop do end return 1 end, flags={'no-writes'}}\n")
#: The kinds of fault.
KINDS = ("stall", "oom", "misconf", "password")


def stall(owner: Connection, seconds: float) -> None:
    """Keep Redis busy for ``seconds`` (its own clock) on the instance owner's connection
    ``owner``, with the drill's busy function (loaded first)."""
    owner.execute_command("FUNCTION", "LOAD", "REPLACE", STALL_LIBRARY)
    owner.execute_command("FCALL", "fluxes_drill_stall", 0, repr(float(seconds)))


class Fault:
    """One fault of ``kind`` lasting about ``seconds``, on a Redis whose data directory is
    ``data_dir``; :meth:`begin` and :meth:`end` run on ``owner``'s one connection."""

    def __init__(self, kind: str, seconds: float, owner: Connection, data_dir: Path) -> None:
        if kind not in KINDS:
            raise ValueError(f"--fault must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        self.seconds = seconds
        self.owner = owner
        self.dump = data_dir / "dump.rdb"
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        """Start the fault (a stall runs in a thread of its own until it ends)."""
        owner = self.owner
        if self.kind == "stall":
            self._thread = threading.Thread(target=stall, args=(owner, self.seconds),
                                            name="drill-stall", daemon=True)
            self._thread.start()
            time.sleep(0.2)  # the function runs: what follows meets a stalled Redis
        elif self.kind == "oom":
            owner.config_set("maxmemory", "1")
        elif self.kind == "misconf":
            owner.config_set("save", "3600 1")
            (self.dump / "in-the-way").mkdir(parents=True, exist_ok=True)
            owner.bgsave()
            self._await_snapshot("err")
        else:
            owner.execute_command("ACL", "SETUSER", "default", "resetpass",
                                  f">{uuid.uuid4().hex}")
            owner.execute_command("CLIENT", "KILL", "TYPE", "normal")

    def end(self, limit: float) -> None:
        """End the fault (a stall: wait for it, at most ``limit`` seconds)."""
        owner = self.owner
        if self._thread is not None:
            self._thread.join(limit)
        elif self.kind == "oom":
            owner.config_set("maxmemory", "0")
        elif self.kind == "misconf":
            shutil.rmtree(self.dump, ignore_errors=True)
            owner.bgsave()
            self._await_snapshot("ok")
            owner.config_set("save", "")
        else:
            owner.execute_command("ACL", "SETUSER", "default", "resetpass", "nopass")

    def _await_snapshot(self, status: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            info = self.owner.info("persistence")
            if not info.get("rdb_bgsave_in_progress") and \
                    info.get("rdb_last_bgsave_status") == status:
                return
            time.sleep(0.05)
        raise FluxesError(f"drill: the snapshot did not end with status {status!r}")
