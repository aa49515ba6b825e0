"""Following a job: its output stream and its eventlog, until it is inactive.

``fluxes job attach``, ``fluxes run`` and ``fluxes job wait`` block on the
job's streams with XREAD BLOCK (no polling loop) and end once the ``clean``
event is in and the output written before it has been printed (exec writes a
rank's output before it reports the rank's status, so everything is in the
output stream by then).

A job's output stream is private to its owner and the instance owner: its
key carries the owner's uid (read from the job hash, which is public), and
Redis refuses anyone else (docs/security.md), which is said in one line.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from fluxes.cli.display import fmt_id, shown_id
from fluxes.store import jobfacts

if TYPE_CHECKING:
    from fluxes.domain.job.model import Job
    from fluxes.store.instance import Instance


class Outcome:
    """How a followed job ended."""

    def __init__(self, job: Job) -> None:
        self.job = job

    @property
    def exit_code(self) -> int:
        """flux's rule: the job's exit code, but 1 when a fatal exception ended a job
        whose tasks exited 0 (a time limit or cancel the tasks survived) or never ran."""
        code = self.job.exit_code or 0
        if code == 0 and self.job.fatal is not None:
            return 1
        return code

    def message(self) -> str | None:
        """One line explaining a failure (exception or non-zero exit), or None."""
        job = self.job
        if job.fatal is not None:
            note = f" {job.fatal.note}" if job.fatal.note else ""
            return f"job {fmt_id(job.id)}: exception type={job.fatal.type}{note}"
        code = job.exit_code
        if code:
            return f"job {fmt_id(job.id)}: task(s) exited with exit code {code}"
        return None


#: The job hash field naming the job's owner, read without redis-py (fluxes.store.jobfacts).
OWNER_FIELD = jobfacts.OWNER_FIELD


def _denied(exc: BaseException) -> bool:
    """Whether ``exc`` is Redis refusing an ACL user (redis-py's NoPermissionError, told
    by name: importing redis-py to name it would cost fluxes run its start-up)."""
    return type(exc).__name__ == "NoPermissionError"


def private_output(jobid: int) -> str:
    """The one line said to a user who may not read another user's job output."""
    return (f"job {fmt_id(jobid)}: its output is private (only its owner and the instance "
            "owner can read it)")


def output_key(inst: Instance, jobid: int) -> str | None:
    """The key of the job's output stream (it carries the owner's uid, from the job
    hash); None when the job has no hash (unknown or purged)."""
    owner = jobfacts.owner_of(inst.redis, inst.keys, jobid)
    return None if owner is None else inst.keys.output(owner, jobid)


def follow(inst: Instance, jobid: int, output: bool = True, label: bool = False,
           out: TextIO | None = None, err: TextIO | None = None,
           timeout: float | None = None, state: dict[str, Any] | None = None) -> Outcome:
    """Print the job's output (if ``output``) until it is inactive; return how it ended.

    ``state`` (a dict the caller keeps) lets a follow interrupted by Ctrl-C
    resume where it stopped instead of printing the output again.
    """
    from fluxes.errors import FluxesError

    stdout = out if out is not None else sys.stdout
    stderr = err if err is not None else sys.stderr
    keys = inst.keys
    client = inst.redis
    saved = state if state is not None else {}
    follower = saved.get("follower")
    if follower is None:
        follower = jobfacts.EventlogFollower(client, keys, jobid)
        if not follower.exists:
            raise FluxesError(f"job {shown_id(jobid)} not found")
        saved["follower"] = follower
    out_key = output_key(inst, jobid) if output else None
    pos = saved.setdefault("pos", {})
    if out_key is not None:
        pos.setdefault(out_key, "0-0")
    try:
        return _follow(inst, jobid, follower, out_key, pos, saved, label, stdout, stderr,
                       timeout)
    except Exception as exc:
        if _denied(exc):
            raise FluxesError(private_output(jobid)) from None
        raise


def _follow(inst: Instance, jobid: int, follower: jobfacts.EventlogFollower,
            out_key: str | None, pos: dict[str, str], saved: dict[str, Any], label: bool,
            stdout: TextIO, stderr: TextIO, timeout: float | None) -> Outcome:
    from fluxes.domain.job.model import Job, apply
    from fluxes.domain.job.states import JobState
    from fluxes.errors import FluxesError
    from fluxes.store.entries import decode_entry

    keys = inst.keys
    client = inst.redis
    log_key = follower.key
    same_slot = out_key is None or keys.same_slot(log_key, out_key)
    job = saved.get("job") or Job(jobid)
    if "job" not in saved:
        for _sid, fields in follower.history:
            job = apply(decode_entry(fields[b"n"], fields[b"t"], fields.get(b"c")), job)
        saved["job"] = job
    deadline = None if timeout is None else time.monotonic() + timeout
    done = job.state is JobState.INACTIVE
    while True:
        pos[log_key] = follower.position
        block = 0 if not done else None
        if deadline is not None and not done:
            block = max(1, int((deadline - time.monotonic()) * 1000))
            if deadline - time.monotonic() <= 0:
                raise FluxesError(f"job {fmt_id(jobid)} did not finish within {timeout:g}s")
        if same_slot or len(pos) == 1:
            reply = jobfacts.read_new(client, pos, block=block)
        else:
            # streams in different slots cannot share one XREAD (Redis Cluster):
            # block briefly on the eventlog, then take what output there is
            assert out_key is not None
            reply = jobfacts.read_new(client, {log_key: pos[log_key]},
                                      block=100 if block is not None else None) + \
                jobfacts.read_new(client, {out_key: pos[out_key]})
        got = False
        for stream_b, entries in reply or []:
            stream = stream_b.decode()
            if stream == log_key:
                for _sid, fields in follower.take(entries):
                    got = True
                    job = apply(decode_entry(fields[b"n"], fields[b"t"], fields.get(b"c")), job)
                    saved["job"] = job
                continue
            for sid, fields in entries:
                got = True
                pos[stream] = sid.decode()
                _print_output(fields, label, stdout, stderr)
        if done and not got:
            break
        if job.state is JobState.INACTIVE:
            done = True  # one more read for output written before clean
    stdout.flush()
    from fluxes.store.private import revealed_job

    return Outcome(revealed_job(client, keys, job))


def _print_output(fields: dict[bytes, bytes], label: bool, out: TextIO, err: TextIO) -> None:
    data = fields.get(b"data")
    if data is None:
        return  # an eof marker
    text = data.decode("utf-8", "replace")
    stream = err if fields.get(b"stream") == b"stderr" else out
    if label:
        rank = fields.get(b"rank", b"?").decode()
        text = "".join(f"{rank}: {line}" for line in text.splitlines(keepends=True))
    stream.write(text)


def print_output(inst: Instance, jobid: int, label: bool = False) -> None:
    """Print whatever output the job has so far (no waiting); FluxesError when the job
    is another user's."""
    from fluxes.errors import FluxesError

    key = output_key(inst, jobid)
    if key is None:
        return
    try:
        entries = jobfacts.read_range(inst.redis, key)
    except Exception as exc:
        if _denied(exc):
            raise FluxesError(private_output(jobid)) from None
        raise
    for _sid, fields in entries:
        _print_output(fields, label, sys.stdout, sys.stderr)


def redirections(jobid: int, jobspec_text: str | None) -> list[tuple[str, str]]:
    """(stream, file) for each output stream the jobspec sends to a file.

    Paths are expanded as the exec worker expands them; a template naming a
    task or rank (one file per task) is shown as written.
    """
    if not jobspec_text or '"output"' not in jobspec_text:
        return []  # no file output (attributes.system.shell.options.output)
    from fluxes.domain.exec.layout import expand_template, job_name, output_spec

    try:
        spec = orjson.loads(jobspec_text)
        outputs = output_spec(spec)
    except (orjson.JSONDecodeError, ValueError):
        return []
    system = (spec.get("attributes") or {}).get("system") or {}
    cwd = system.get("cwd") if isinstance(system, dict) else None
    out = []
    for stream, template in (("stdout", outputs.stdout), ("stderr", outputs.stderr)):
        if template is None:
            continue
        try:
            path = expand_template(template, jobid=jobid, name=job_name(spec))
        except ValueError:
            path = template
        if isinstance(cwd, str) and cwd:
            path = os.path.join(cwd, path)
        out.append((stream, path))
    return out


def print_redirections(inst: Instance, jobid: int, err: TextIO | None = None,
                       jobspec_text: str | None = None) -> None:
    """Say on stderr where each stream the job sends to a file goes (``jobspec_text``:
    the job's jobspec when the caller has it, else it is read).

    The output stream holds nothing of such a stream, so without this
    ``job attach`` and ``job output`` would print nothing and leave the user
    wondering (flux's attach says it too).
    """
    stream_err = err if err is not None else sys.stderr
    text = jobspec_text if jobspec_text is not None else _jobspec_text(inst, jobid)
    for stream, path in redirections(jobid, text):
        print(f"fluxes: job {fmt_id(jobid)}: {stream} redirected to {path}", file=stream_err)


def _jobspec_text(inst: Instance, jobid: int) -> str | None:
    """The jobspec the job runs with, as text (None: none, or another user's job, whose
    jobspec is private: the output says so)."""
    from fluxes.store.jobhash import JobHashes

    try:
        [spec] = JobHashes(inst.redis, inst.keys).effective_jobspecs([jobid])
    except Exception as exc:
        if _denied(exc):
            return None
        raise
    return None if spec is None else spec.decode("utf-8", "replace")


def follow_interruptible(inst: Instance, jobid: int, label: bool = False,
                         jobspec_text: str | None = None) -> Outcome:
    """:func:`follow`, where Ctrl-C twice within 2 s cancels the job (as flux).

    The first interrupt only says so; after the cancel the output is still
    followed to the end; a further interrupt detaches (exit status 130).
    Streams sent to files are named first (:func:`print_redirections`; from
    ``jobspec_text`` when the caller has the jobspec, ``fluxes run``).
    """
    if jobspec_text is not None:
        print_redirections(inst, jobid, jobspec_text=jobspec_text)
    elif jobfacts.has_eventlog(inst.redis, inst.keys, jobid):
        print_redirections(inst, jobid)
    last: float | None = None
    canceled = False
    state: dict[str, Any] = {}
    while True:
        try:
            return follow(inst, jobid, label=label, state=state)
        except KeyboardInterrupt:
            now = time.monotonic()
            if canceled:
                raise
            if last is not None and now - last <= 2.0:
                # here: the message module is a start-up cost every run would pay
                from fluxes.store.client import Client

                Client(inst).cancel([jobid], note="interrupted")
                print(f"fluxes: job {fmt_id(jobid)}: canceled", file=sys.stderr)
                canceled = True
            else:
                print(f"fluxes: interrupt again within 2s to cancel job {fmt_id(jobid)}",
                      file=sys.stderr)
            last = now
