"""The ingest's pure rules (:mod:`fluxes.domain.ingest`): blocks, request copies, control
routing and the update checks that need no Redis."""

from __future__ import annotations

from fluxes import messages as proto
from fluxes.config import InstanceConfig
from fluxes.domain.ingest import requests as rq
from fluxes.domain.ingest import routing
from fluxes.domain.jm.content import json_bytes
from fluxes.domain.job.model import Job

OWNER = 1000


def pending(req: str, jobs: int = 1, user: str = "alice") -> rq.Pending:
    request = proto.SubmitJobs(req=req, jobs=[proto.SubmitItem()] * jobs)
    return rq.Pending("s", b"1-0", {}, user, 1, request)


def test_blocks_hold_at_most_the_bound_and_a_big_request_alone() -> None:
    requests = [pending("a", 3), pending("b", 3), pending("c", 9), pending("d", 1)]
    got = [[p.request.req for p in block] for block in rq.blocks(requests, 6)]
    assert got == [["a", "b"], ["c"], ["d"]]


def test_a_request_sent_twice_in_a_block_is_handled_once() -> None:
    copies, digests = rq.first_copies([pending("a"), pending("b"), pending("a"),
                                       pending("a", user="bob")])
    assert copies == {0: 0, 1: 1, 2: 0, 3: 3}
    assert set(digests) == {"alice:a", "alice:b", "bob:a"}


def test_control_requests_go_to_the_partitions_of_their_jobs() -> None:
    forwards: routing.Forwards = {}
    cancel = proto.CancelJobs(req="r", ids=[4, 5, 7])
    assert routing.route(cancel, 7, "reply", 2, OWNER, forwards) is None
    assert {part: [m.ids for m in msgs if isinstance(m, proto.CancelRequest)]
            for part, msgs in forwards.items()} == \
        {0: [[4]], 1: [[5, 7]]}
    assert rq.control_ids(cancel) == [4, 5, 7]
    assert rq.control_ids(proto.KillAll(req="k")) is None


def test_only_the_owner_kills_other_users_jobs() -> None:
    forwards: routing.Forwards = {}
    other = proto.KillAll(req="k", user=OWNER + 1)
    assert "permission denied" in str(routing.route(other, 7, "r", 3, OWNER, forwards))
    assert forwards == {}
    assert routing.route(other, OWNER, "r", 3, OWNER, forwards) is None
    assert sorted(forwards) == [0, 1, 2]


def test_an_update_of_an_unknown_or_inactive_job_is_refused() -> None:
    ctx = routing.UpdateContext(InstanceConfig(), {}, None, OWNER)
    request = proto.UpdateJob(req="u", id=42, updates={"attributes.system.duration": 60})
    for job in (None, Job(42)):
        got = routing.check_update(request, 7, "r", "f42", job, 7, b"{}", b"{}", "bob", (),
                                   ctx)
        assert got == "f42: job is inactive or unknown"


def test_json_bytes_is_a_right_sized_copy() -> None:
    doc = {"env": {f"V{i}": "x" * 40 for i in range(40)}}
    data = json_bytes(doc)
    assert data == b'{"env":{' + b",".join(
        f'"V{i}":"{"x" * 40}"'.encode() for i in range(40)) + b"}}"
    assert isinstance(data, bytes)
