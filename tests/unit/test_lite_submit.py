"""``fluxes submit``'s one-job path without the message module (fluxes/store/lite_submit.py):
the request it sends is the client's, and it reads every answer as the client does."""

from __future__ import annotations

from typing import Any

import pytest

from fluxes import messages as proto
from fluxes.formats.jobspec import Jobspec
from fluxes.store import lite_submit
from fluxes.store.client import _submission_item, job_results


def _spec(**kw: Any) -> Jobspec:
    return Jobspec.from_command(["app", "--x", "é"], environment={"A": "1", "B": "ü"}, **kw)


@pytest.mark.parametrize(("spec_urgency", "urgency"), [
    (None, None), (None, 0), (None, 31), (7, None), (7, 20)])
def test_the_request_is_the_client_s(spec_urgency: int | None, urgency: int | None) -> None:
    spec = _spec(urgency=spec_urgency, duration=90.5, name="n")
    body = lite_submit.request_body(spec, urgency, "r1")
    client_s = proto.SubmitJobs(req="r1", jobs=[_submission_item(
        {"jobspec": spec, "urgency": urgency})])
    assert proto.decode_request({b"d": body}) == client_s
    assert body == proto.encode_request(client_s)["d"]


_ANSWERS: list[proto.Reply] = [
    proto.Reply(jobs=[proto.JobResult(id=1234567890123)]),
    proto.Reply(jobs=[proto.JobResult(id=2**64 - 1)]),
    proto.Reply(jobs=[proto.JobResult(error="job requests 99 cores, only 2 exist")]),
    proto.Reply(errors=["queue batch is disabled", "second"]),
]


@pytest.mark.parametrize("answer", _ANSWERS, ids=str)
def test_the_ingest_s_answers_are_read_here(answer: proto.Reply) -> None:
    raw = proto.encode_reply(answer)
    assert [lite_submit.read_answer(raw)] == job_results(answer, 1)


@pytest.mark.parametrize("raw", [
    b'{"jobs": [{"id": 5}], "errors": null}', b'{"jobs": [{}]}', b'{"jobs": []}',
    b'{"jobs": [{"id": 1}, {"id": 2}]}', b'{"jobs": [{"id": true}]}', b'{"jobs": [{"id": -1}]}',
    b'{"jobs": [{"id": 1, "error": "x"}]}', b'{"jobs": [{"id": 1.5}]}', b'{"errors": []}',
    b'{"errors": [3]}', b'{"jobs": null}', b'{}', b'[]', b'not json', b'"x"',
    b'{"jobs": [{"id": 1}], "extra": 1}', b'{"jobs": [{"id": ' + b'9' * 30 + b'}]}',
    b'{"jobs": [{"error": "' + b'x' * 70_000 + b'"}]}',
])
def test_other_answers_are_left_to_the_message_module(raw: bytes) -> None:
    """Anything but the ingest's shapes is not read here (the client's decoder and its
    messages then decide)."""
    assert lite_submit.read_answer(raw) is None
