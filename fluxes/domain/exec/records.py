"""The record of a job on a rank (``{ns}:exec:jobs:<rank>``), written and read back.

A restarted exec worker carries on from these records (docs/exec.md,
"Robustness"): ``{"k":"run", ...}`` for real jobs (per task: rank, pid,
forwarded stdout/stderr offsets, status, lost, exit code; the owner's uid
``u`` and ``as`` when the tasks run as the owner), ``{"k":"sim",
"d": end time}`` for simulated ones, ``{"k":"done", ...}`` for finished ones.
A running job's record also names the cores (``c``) and gpus (``g``) it holds
on the rank when known (idsets), so that starts wait behind it after a restart.
"""

from __future__ import annotations

from typing import Any

import orjson

from fluxes.domain.exec.jobs import ExecJob, TaskProc

#: Forwarded output offsets of a restored task: (stdout, stderr).
Offsets = dict[int, tuple[int, int]]


def encode(job: ExecJob) -> bytes:
    """The JSON kept for ``job`` so that a restarted worker can carry on."""
    if job.kind == "done":
        return orjson.dumps({"k": "done", "s": job.started, "st": job.status,
                             "e": job.error, "dt": job.done_time})
    if job.kind == "sim":
        if job.cores or job.gpus:
            return orjson.dumps({"k": "sim", "d": job.deadline, "c": job.cores,
                                 "g": job.gpus})
        return orjson.dumps({"k": "sim", "d": job.deadline})
    tasks = []
    for t in job.tasks:
        out = err = 0
        for s in t.streams:
            if s.name == "stdout":
                out = s.offset
            elif s.name == "stderr":
                err = s.offset
        tasks.append([t.rank, t.pid, out, err, t.status, t.lost, t.code])
    return orjson.dumps({"k": "run", "s": job.started, "t": tasks, "fw": job.forward,
                         "e": job.error, "ks": job.kill_signal, "kt": job.kill_time,
                         "x": job.escalated, "ob": job.forwarded, "tr": job.truncated,
                         "u": job.owner, "as": job.as_user, "c": job.cores,
                         "g": job.gpus})


def decode(rank: int, jobid: int, raw: bytes | str, now: float) -> tuple[ExecJob, Offsets]:
    """The job a record describes, and its tasks' forwarded output offsets.

    Any kind but "done" and "sim" is a real job's.  Tasks come back as they
    were recorded (``own`` False: whose children they are is for the
    adoption to find out).  A "done" record without a time gets ``now``.
    ValueError for a record that cannot be read.
    """
    try:
        rec: Any = orjson.loads(raw)
        kind = rec["k"]
        return _decode(rank, jobid, rec, kind, now)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise ValueError(f"unreadable exec record of job {jobid} on rank {rank}") from None


def _decode(rank: int, jobid: int, rec: Any, kind: Any,
            now: float) -> tuple[ExecJob, Offsets]:
    if kind == "done":
        job = ExecJob(jobid, rank, "done", started=bool(rec.get("s")), status=rec.get("st"),
                      released=True, error=rec.get("e"), done_time=float(rec.get("dt", now)))
        return job, {}
    if kind == "sim":
        return ExecJob(jobid, rank, "sim", started=True, deadline=float(rec["d"]),
                       cores=str(rec.get("c", "")), gpus=str(rec.get("g", ""))), {}
    job = ExecJob(jobid, rank, "run", started=bool(rec.get("s")), error=rec.get("e"),
                  forward=str(rec.get("fw", "")), kill_signal=int(rec.get("ks", 0)),
                  kill_time=float(rec.get("kt", 0.0)), escalated=bool(rec.get("x")),
                  forwarded=int(rec.get("ob", 0)), truncated=bool(rec.get("tr")),
                  owner=int(rec.get("u", -1)), as_user=bool(rec.get("as")),
                  cores=str(rec.get("c", "")), gpus=str(rec.get("g", "")))
    offsets: Offsets = {}
    for task_rank, pid, out_off, err_off, status, lost, code in rec.get("t", []):
        task = TaskProc(int(task_rank), int(pid), False, status)
        task.lost = bool(lost)
        task.code = code
        job.tasks.append(task)
        offsets[task.rank] = (int(out_off or 0), int(err_off or 0))
    return job, offsets
