"""The client side of user requests: submit, cancel, urgency, raise.

A request is one XADD to the user's own submit stream; the answer arrives on
a reply list the client waits on with BLPOP (a blocking read with a timeout,
no polling). Bulk submissions are split into chunks that are all sent in one
pipeline before the first reply is awaited, so thousands of jobs cost a few
round trips.
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from fluxes import messages as proto
from fluxes.errors import FluxesError
from fluxes.formats.idset import IDSet, chunks
from fluxes.store.instance import Instance

#: Jobs per submit request when submitting in bulk.
CHUNK = 1000
#: Jobs per array request at most (``submit --cc``), whatever the instance allows: what
#: the ingest holds for one request grows with it.
ARRAY_CHUNK = 10_000
DEFAULT_TIMEOUT = 60.0


class RequestTimeout(FluxesError):
    """No answer arrived in time (is the instance running its ingest and job manager?)."""


def current_user() -> str:
    """The name of the user running this process."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _submission_item(item: Mapping[str, Any]) -> proto.SubmitItem:
    """``item`` as the ingest reads it: a Jobspec becomes its document and lends
    its urgency when the item names none; a None urgency is left out, so that
    the instance's default applies."""
    from fluxes.formats.jobspec import Jobspec  # not at import: it loads yaml and jsonschema

    spec = item.get("jobspec")
    urgency = item.get("urgency")
    if isinstance(spec, Jobspec):
        if urgency is None:
            urgency = spec.urgency
        spec = spec.to_dict()
    return proto.SubmitItem(jobspec=spec, yaml=item.get("yaml"), urgency=urgency,
                            flags=item.get("flags", 0))


class Client:
    """Sends requests to an instance as one user."""

    def __init__(self, instance: Instance, user: str | None = None) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        # The user's submit stream: a credentials file's user (its Redis ACL
        # lets it write only that stream) before the UNIX user name.
        self.user = user or instance.user or current_user()

    def _post(self, requests: Sequence[proto.UserRequest]) -> list[str]:
        """XADD typed requests in one pipeline; return their reply keys."""
        pipe = self.redis.pipeline(transaction=False)
        stream = self.keys.submit(self.user)
        for request in requests:
            pipe.xadd(stream, proto.encode_request(request))
        pipe.execute()
        return [self.keys.reply(self.user, request.req) for request in requests]

    def _send(self, requests: Sequence[Mapping[str, Any]]) -> list[str]:
        """XADD requests given as dicts (each gets its ``req``) in one pipeline; return
        their reply keys (tests and tools: forged or malformed requests)."""
        pipe = self.redis.pipeline(transaction=False)
        reply_keys = []
        stream = self.keys.submit(self.user)
        for request in requests:
            req = uuid.uuid4().hex
            reply_keys.append(self.keys.reply(self.user, req))
            pipe.xadd(stream, {"d": orjson.dumps({**request, "req": req})})
        pipe.execute()
        return reply_keys

    def _answers(self, reply_key: str, timeout: float, count: int = 1) -> list[proto.Reply]:
        """Wait for ``count`` replies on ``reply_key``."""
        answers = []
        for _ in range(count):
            got = self.redis.blpop([reply_key], timeout=max(timeout, 0.01))
            if got is None:
                raise RequestTimeout(no_answer(timeout))
            answers.append(decode_answer(got[1]))
        return answers

    def _wait(self, reply_key: str, timeout: float, count: int = 1) -> list[dict[str, Any]]:
        """:meth:`_answers` as dicts (tests and tools)."""
        return [proto.to_builtins(a) for a in self._answers(reply_key, timeout, count)]

    def submit(self, items: Sequence[Mapping[str, Any]], timeout: float = DEFAULT_TIMEOUT,
               progress: Callable[[int], None] | None = None) -> list[int | str]:
        """Submit jobs (``{"jobspec": ..., "urgency": ..., "flags": ...}`` each).

        ``jobspec`` is a document or a :class:`~fluxes.formats.jobspec.Jobspec`.  An
        item whose ``urgency`` is missing or None takes the Jobspec's own
        :attr:`~fluxes.formats.jobspec.Jobspec.urgency`; with neither, the instance
        applies its default (16).  Returns, in order, each job's id or the
        one-line reason it was refused.
        """
        jobs = [_submission_item(item) for item in items]
        requests: list[proto.UserRequest] = []
        for i in range(0, len(jobs), CHUNK):
            requests += _fitted(jobs[i:i + CHUNK])
        too_big = {id(r) for r in requests if _size(r) > proto.MAX_REQUEST_BYTES}
        reply_keys = self._post([r for r in requests if id(r) not in too_big])
        keys = iter(reply_keys)
        out: list[int | str] = []
        for request in requests:
            assert isinstance(request, proto.SubmitJobs)
            if id(request) in too_big:
                # the ingest reads no request this large: it could not even answer
                out.append(f"job is {_size(request)} bytes as a request, the limit is "
                           f"{proto.MAX_REQUEST_BYTES}")
                continue
            out += job_results(self._answers(next(keys), timeout)[0], len(request.jobs))
            if progress is not None:
                progress(len(out))
        return out

    def submit_array(self, item: Mapping[str, Any], ids: IDSet,
                     timeout: float = DEFAULT_TIMEOUT,
                     progress: Callable[[int], None] | None = None,
                     per_request: int | None = None, cc_var: bool = False
                     ) -> list[int | str]:
        """Submit one copy of ``item`` (as for :meth:`submit`) per id of ``ids``, ``{cc}``
        in its jobspec replaced by the id (``submit --cc``); each id's job id or
        refusal, in order.

        The copies travel as array requests (one job and an id set each,
        fluxes/domain/jm/arrays.py) of at most ``per_request`` jobs, by default the
        instance's ``[ingest] max-jobs-per-request``: whatever the range, every
        request stays small and within the limit, and the ingest makes the copies.
        """
        return self._collect_array(self._post_array(item, ids, per_request, cc_var),
                                   timeout, progress)

    def _post_array(self, item: Mapping[str, Any], ids: IDSet,
                    per_request: int | None = None, cc_var: bool = False
                    ) -> list[tuple[int, str]]:
        """Send :meth:`submit_array`'s requests in one pipeline: (jobs, reply key) each.
        FluxesError, and nothing sent, when the job is too big for the ingest to read."""
        job = _submission_item(item)
        size = per_request if per_request is not None else self.jobs_per_request()
        requests = [proto.SubmitJobs(req=_req(), jobs=[job], cc=str(part), cc_var=cc_var)
                    for part in chunks(ids, min(size, ARRAY_CHUNK))]
        if requests and _size(requests[0]) > proto.MAX_REQUEST_BYTES:
            raise FluxesError(f"job is {_size(requests[0])} bytes as a request, the limit "
                              f"is {proto.MAX_REQUEST_BYTES}")
        return [(len(IDSet(r.cc or "")), key)
                for r, key in zip(requests, self._post(requests), strict=True)]

    def _collect_array(self, posted: list[tuple[int, str]], timeout: float,
                       progress: Callable[[int], None] | None = None) -> list[int | str]:
        """The answers to :meth:`_post_array`'s requests, one per job, in order."""
        out: list[int | str] = []
        for count, key in posted:
            out += job_results(self._answers(key, timeout)[0], count)
            if progress is not None:
                progress(len(out))
        return out

    def jobs_per_request(self) -> int:
        """The instance's ``[ingest] max-jobs-per-request``."""
        return self.instance.config().ingest.max_jobs_per_request

    def _control(self, request: proto.UserRequest, ids: Sequence[int],
                 timeout: float, answers: int | None = None) -> dict[str, Any]:
        parts = {self.keys.partition_of(j) for j in ids} or {0}
        key = self._post([request])[0]
        merged: dict[str, Any] = {"ok": [], "errors": []}
        for _ in range(answers or len(parts)):
            answer = self._answers(key, timeout)[0]
            merged["ok"] += answer.ok or []
            merged["errors"] += answer.errors or []
            if answer.old is not None:
                merged["old"] = answer.old
            if answer.updates is not None:
                merged["updates"] = answer.updates
            if answer.ok is None and answer.errors:
                break  # the ingest refused the whole request: no job manager answers
        return merged

    def cancel(self, ids: Sequence[int], note: str = "",
               timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Cancel jobs; returns ``{"ok": [ids], "errors": [lines]}``."""
        return self._control(proto.CancelJobs(req=_req(), ids=list(ids), note=note), ids,
                             timeout)

    def raise_exception(self, ids: Sequence[int], etype: str, severity: int = 0,
                        note: str = "", timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Raise an exception on jobs (``flux job raise``)."""
        return self._control(proto.RaiseOnJobs(req=_req(), ids=list(ids), type=etype,
                                               severity=severity, note=note), ids, timeout)

    def signal(self, ids: Sequence[int], sig: int,
               timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Send ``sig`` to running jobs' tasks (``flux job kill``); the jobs go on."""
        return self._control(proto.SignalJobs(req=_req(), ids=list(ids), signal=sig), ids,
                             timeout)

    def killall(self, sig: int, user: int | None = None, all_users: bool = False,
                dry_run: bool = False, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Signal every running job of ``user`` (a uid; default yours), or of every
        user; ``dry_run`` only names them. ``ok`` lists the jobs matched."""
        request = proto.KillAll(req=_req(), signal=sig, user=user, all_users=all_users,
                                dry_run=dry_run)
        # every partition's job manager answers for its own jobs
        return self._control(request, [], timeout, answers=self.keys.partitions)

    def update(self, jobid: int, updates: Mapping[str, Any], dry_run: bool = False,
               timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Update a job's jobspec (``flux update``): ``updates`` maps keys (``duration``,
        ``queue``, ``name``) to values; the answer's ``updates`` says what was (dry run:
        would be) applied."""
        return self._control(proto.UpdateJob(req=_req(), id=jobid, updates=dict(updates),
                                              dry_run=dry_run), [jobid], timeout)

    def urgency(self, jobid: int, urgency: int,
                timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Change a job's urgency; the answer has ``old`` on success."""
        return self._control(proto.SetUrgency(req=_req(), id=jobid, urgency=urgency), [jobid],
                             timeout)


def no_answer(timeout: float) -> str:
    """What a request that got no answer in ``timeout`` seconds says."""
    return f"no answer within {timeout:g}s (is the instance's ingest running?)"


def decode_answer(raw: bytes) -> proto.Reply:
    """An answer as read from its reply list; FluxesError when malformed."""
    try:
        return proto.decode_reply(raw)
    except proto.MessageError as exc:
        raise FluxesError(f"malformed answer from the instance: {exc}") from None


def job_results(answer: proto.Reply, count: int) -> list[int | str]:
    """Each job's id or one-line refusal in ``answer`` to a submit request of ``count``
    jobs (a request refused whole: its first error for each)."""
    if answer.jobs is None:
        errors = answer.errors or ["submission refused"]
        return [str(errors[0])] * count
    return [r.id if r.id is not None else str(r.error) for r in answer.jobs]


def _req() -> str:
    """A new request id (unique per user)."""
    return uuid.uuid4().hex


def _fitted(jobs: list[proto.SubmitItem]) -> list[proto.UserRequest]:
    """Submit requests for ``jobs``, split until each fits the ingest's size bound
    (a single job that does not fit goes alone: the ingest refuses it with a reason)."""
    request = proto.SubmitJobs(req=_req(), jobs=jobs)
    if len(jobs) == 1 or _size(request) <= proto.MAX_REQUEST_BYTES:
        return [request]
    half = len(jobs) // 2
    return _fitted(jobs[:half]) + _fitted(jobs[half:])


def _size(request: proto.UserRequest) -> int:
    """Bytes of ``request`` on the wire."""
    return len(proto.encode_request(request)["d"])
