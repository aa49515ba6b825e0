"""Child processes that do not outlive the process that started them.

A private instance's redis-server and workers belong to the ``fluxes start``,
``bench`` or ``drill`` process that spawned them. If that process is killed
(SIGKILL, an OOM kill, a crashed test run), its children would otherwise run
on as orphans: workers spinning against Redis, a redis-server holding memory.
On Linux the kernel can send a child a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``); elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when its parent dies.

    Call it in the parent (it records the parent's pid); pass the result as
    ``preexec_fn``. Returns None where the kernel offers no such signal. The
    signal fires when the *thread* that spawned the child ends, so spawn from
    the main thread (the launcher does). The child also exits at once if the
    parent died before the signal was armed.
    """
    libc = _LIBC
    if libc is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        # Runs in the child between fork and exec, where another thread's locks
        # may be held (ruff's PLW1509): one system call and a pid check take none.
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm
