"""One job submitted without the message module: ``fluxes submit``'s common case.

Importing :mod:`fluxes.messages` (msgspec and the type of every message) costs a
short command ~5 ms of the 80 ``fluxes submit`` may take (issue 26), to encode
one request and read one answer. :func:`submit_one` posts the same request
(``SubmitJobs`` with one ``SubmitItem``, as :class:`fluxes.store.client.Client`
sends it: tests/cli/test_cli_imports.py checks that the message module
decodes it to the very request the client builds) and reads the answers the
ingest gives it: one job's id, one job's refusal, or the request refused
whole. An answer of any other shape goes to the message module's decoder and
:func:`fluxes.store.client.job_results`, so whatever comes back, the outcome
and its message are the client's.

A request larger than :data:`QUICK_MAX_BYTES` is not sent here (the caller
takes the client: it knows the ingest's size bound and says why a job is too
big).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.store.instance import current_user

if TYPE_CHECKING:
    from fluxes.formats.jobspec import Jobspec
    from fluxes.store.instance import Instance

#: The largest request sent here (far below the ingest's bound, fluxes.messages).
QUICK_MAX_BYTES = 1 << 20
#: The largest answer read here (one job's id or refusal is ~100 bytes).
QUICK_ANSWER_BYTES = 1 << 16
#: As the client's (fluxes.store.client.DEFAULT_TIMEOUT).
DEFAULT_TIMEOUT = 60.0


def request_body(spec: Jobspec, urgency: int | None, req: str) -> bytes:
    """The request ``Client.submit`` sends for ``spec``: the job's urgency, else the
    Jobspec's own, else none (the instance's default applies)."""
    job: dict[str, Any] = {"jobspec": spec.to_dict()}
    if urgency is None:
        urgency = spec.urgency
    if urgency is not None:
        job["urgency"] = urgency
    return orjson.dumps({"t": "submit", "req": req, "jobs": [job]})


def read_answer(raw: bytes) -> int | str | None:
    """The one job's id or refusal in an answer of the shapes the ingest gives; None
    for anything else (the message module decides)."""
    if len(raw) > QUICK_ANSWER_BYTES:
        return None
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(answer, dict) or len(answer) != 1:
        return None
    if "errors" in answer:  # the request refused whole
        errors = answer["errors"]
        ok = isinstance(errors, list) and errors and all(isinstance(e, str) for e in errors)
        return errors[0] if ok else None
    jobs = answer.get("jobs")
    if not isinstance(jobs, list) or len(jobs) != 1 or not isinstance(jobs[0], dict) \
            or len(jobs[0]) != 1:
        return None
    [(key, value)] = jobs[0].items()
    if key == "id" and type(value) is int and 0 <= value < 2**64:
        return value
    if key == "error" and isinstance(value, str):
        return value
    return None


def submit_one(inst: Instance, spec: Jobspec, urgency: int | None = None,
               timeout: float = DEFAULT_TIMEOUT) -> list[int | str] | None:
    """Submit ``spec`` as ``Client(inst).submit([{"jobspec": spec, "urgency": urgency}])``
    does, with its answer: the job's id or the one-line reason it was refused; None,
    and nothing sent, when the request is larger than this path sends."""
    req = uuid.uuid4().hex
    body = request_body(spec, urgency, req)
    if len(body) > QUICK_MAX_BYTES:
        return None
    user = inst.user or current_user()[0]
    inst.redis.xadd(inst.keys.submit(user), {"d": body})
    got = inst.redis.blpop([inst.keys.reply(user, req)], timeout=max(timeout, 0.01))
    if got is None:
        from fluxes.store.client import RequestTimeout, no_answer

        raise RequestTimeout(no_answer(timeout))
    result = read_answer(got[1])
    if result is not None:
        return [result]
    from fluxes.store.client import decode_answer, job_results

    return job_results(decode_answer(got[1]), 1)
