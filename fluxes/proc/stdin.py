"""A job's stdin: ``--input=FILE`` for every task, or the data ``fluxes run`` captured
for task 0 (``attributes.system.shell.options.input.stdin``, fluxes/formats/shellopts.py).

A file is opened by the task itself, as its user, from its working
directory: the command is run through ``/bin/sh -c 'exec "$@" <"$FILE"'``
(so a root worker never opens a path a user named; a file that cannot be
opened fails the task as a shell redirection does, status 2).  Data is put
in an anonymous memory file (``memfd_create``) whose descriptor becomes
task 0's stdin; the other tasks read ``/dev/null``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from fluxes.domain.exec.layout import shell_option
from fluxes.formats.shellopts import stdin_data

#: Runs "$@" with stdin from $1 (opened by the shell, as the task's user, in its cwd).
INPUT_WRAPPER = 'f=$1; shift; exec "$@" <"$f"'


def _stdin(spec: Mapping[str, Any]) -> Any:
    option = shell_option(spec, "input")
    return option.get("stdin") if isinstance(option, Mapping) else None


def with_input_file(spec: Mapping[str, Any], argv: list[str]) -> list[str]:
    """``argv``, run with stdin from the ``--input`` file when the job has one."""
    stdin = _stdin(spec)
    if not isinstance(stdin, Mapping) or stdin.get("type") != "file":
        return argv
    path = stdin.get("path")
    if not isinstance(path, str) or not path:
        raise ValueError("shell.options.input.stdin.path must be a non-empty string")
    return ["/bin/sh", "-c", INPUT_WRAPPER, "sh", path, *argv]


def data_fd(spec: Mapping[str, Any]) -> int | None:
    """A readable descriptor holding the job's captured stdin (None: it has none).
    ValueError when the option is malformed."""
    data = stdin_data(_stdin(spec))
    if data is None:
        return None
    fd = os.memfd_create("fluxes-stdin", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def task_stdin(fd: int | None, task_rank: int) -> dict[int, int]:
    """``{0: fd}`` for task 0 when the job has captured stdin, else nothing."""
    return {0: fd} if fd is not None and task_rank == 0 else {}
