"""Forwarding tasks' output: lines, budgets, the output limit and the stream entries.

Pure: the bytes come from a ``read`` function the process side gives
(``os.pread`` on the task's output file); this module decides what of them
becomes which entry of ``{ns}:output:<owner>:<id>`` (docs/exec.md, "Output"):

* whole lines, split when longer than :data:`MAX_LINE`; a last line without
  a newline once the task has ended;
* at most :data:`OUTPUT_BYTES_BUDGET` bytes / :data:`OUTPUT_LINES_BUDGET`
  lines per loop iteration (:class:`Budget`), so a chatty task cannot stall
  the loop;
* at most the output limit per job and rank: the line that would cross it
  becomes one stderr note and the rest is dropped (:func:`within_limit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fluxes.domain.exec.jobs import ExecJob, Stream, TaskProc
from fluxes.domain.sched.inventory import format_size
from fluxes.formats.idset import IDSet

#: Longest line forwarded as one entry; longer lines are split.
MAX_LINE = 64 * 1024
#: Bytes read per output file and read call.
READ_CHUNK = 256 * 1024
#: Output bytes and lines forwarded per iteration (keeps the loop short).
OUTPUT_BYTES_BUDGET = 4 * 1024 * 1024
OUTPUT_LINES_BUDGET = 20_000
#: The line that replaces a job's output past the limit (``[exec] output-limit``).
TRUNCATED_PREFIX = b"fluxes: output limit"
TRUNCATED_NOTE = ("fluxes: output limit of {limit} reached on rank {rank}: "
                  "further output dropped (use --output/--error files for more)\n")

#: read(stream, size, offset) -> up to ``size`` bytes at ``offset`` (b"" at the end,
#: or when the file is gone).
Reader = Callable[[Stream, int, int], bytes]


class Budget:
    """Output bytes and lines still allowed in this iteration."""

    __slots__ = ("bytes", "lines")

    def __init__(self, nbytes: int = OUTPUT_BYTES_BUDGET,
                 lines: int = OUTPUT_LINES_BUDGET) -> None:
        self.bytes = nbytes
        self.lines = lines

    def left(self) -> bool:
        """Whether anything more may be forwarded in this iteration."""
        return self.bytes > 0 and self.lines > 0


def split_long(line: bytes) -> list[bytes]:
    """``line`` in pieces of at most :data:`MAX_LINE` bytes."""
    if len(line) <= MAX_LINE:
        return [line]
    return [line[i:i + MAX_LINE] for i in range(0, len(line), MAX_LINE)]


def pump(stream: Stream, read: Reader, final: bool, budget: Budget) -> list[bytes]:
    """The whole lines newly written to ``stream``; once its task ended, all to the end.

    A live task's file gets one read per call (fairness between tasks); an
    ended task's (``final``) is read to its end, budget permitting, its last
    partial line forwarded as it is, and ``stream.done`` set (the caller then
    closes the file).  ``stream.offset`` moves past what is returned, so a
    restarted worker resumes there; ``stream.buf`` keeps a partial line.
    """
    out: list[bytes] = []
    while budget.left():
        data = read(stream, min(READ_CHUNK, budget.bytes), stream.offset + len(stream.buf))
        if not data:
            if final:
                if stream.buf:
                    out.append(stream.buf)
                    stream.offset += len(stream.buf)
                    stream.buf = b""
                stream.done = True
            break
        budget.bytes -= len(data)
        buf = stream.buf + data
        cut = buf.rfind(b"\n") + 1
        if cut:
            for line in buf[:cut].splitlines(keepends=True):
                out.extend(split_long(line))
            stream.offset += cut
            buf = buf[cut:]
        while len(buf) >= MAX_LINE:
            out.append(buf[:MAX_LINE])
            stream.offset += MAX_LINE
            buf = buf[MAX_LINE:]
        stream.buf = buf
        if not final:
            break
    budget.lines -= len(out)
    return out


def limit_note(limit: int, rank: int) -> bytes:
    """The stderr line that replaces the output past ``limit`` bytes on ``rank``."""
    return TRUNCATED_NOTE.format(limit=format_size(limit), rank=rank).encode()


def within_limit(job: ExecJob, got: list[bytes], limit: int) -> list[bytes]:
    """The lines of ``got`` that fit the job's output ``limit`` on its rank.

    The first line past the limit is replaced by one note saying so (as
    flux's shell does), and everything after, now and later, is dropped, so
    a job cannot fill Redis with output; complete output of any size goes to
    files (``--output``/``--error``).  Counts in ``job.forwarded``.
    """
    if job.truncated:
        return []
    kept: list[bytes] = []
    for data in got:
        if job.forwarded + len(data) > limit:
            job.truncated = True
            kept.append(limit_note(limit, job.rank))
            break
        job.forwarded += len(data)
        kept.append(data)
    return kept


def add_lines(entries: list[dict[str, Any]], job: ExecJob, task_rank: int, stream: str,
              got: list[bytes]) -> None:
    """Append ``got`` to ``entries`` as output stream entries of task ``task_rank``.

    The limit's note (the last line once the job is truncated) goes out as
    stderr, whichever stream reached the limit.
    """
    label = str(task_rank)
    entries.extend({"rank": label, "stream": stream, "data": data} for data in got)
    if job.truncated and got and got[-1].startswith(TRUNCATED_PREFIX):
        entries[-1]["stream"] = "stderr"


def eof_entry(rank: int, task_ranks: Iterable[int]) -> dict[str, str]:
    """The end marker of a rank's output: readers know its tasks' output is complete."""
    return {"eof": "1", "rank": str(rank), "tasks": str(IDSet(task_ranks))}


def pids_entry(rank: int, host: str, tasks: Iterable[TaskProc]) -> dict[str, str]:
    """The entry that says where a rank's tasks run (``fluxes job hostpids``): its host
    and, per task rank, the pid of its process group (the task's wrapper)."""
    pids = ",".join(f"{task.rank}:{task.pid}" for task in tasks)
    return {"pids": pids, "rank": str(rank), "host": host}


def parse_pids(fields: dict[bytes, bytes]) -> list[tuple[int, str, int]]:
    """``(task rank, host, pid)`` of a :func:`pids_entry` read back; ValueError when the
    entry is not one."""
    raw = fields.get(b"pids")
    if raw is None:
        raise ValueError("not a pids entry")
    host = fields.get(b"host", b"").decode("utf-8", "replace")
    out: list[tuple[int, str, int]] = []
    for item in filter(None, raw.decode().split(",")):  # a rank without tasks has none
        task, sep, pid = item.partition(":")
        if not sep or not task.isdigit() or not pid.isdigit():
            raise ValueError(f"bad pids entry {raw[:40]!r}")
        out.append((int(task), host, int(pid)))
    return out
