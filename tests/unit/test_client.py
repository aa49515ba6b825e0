"""Tests for fluxes.store.client: what a submission puts on the user's submit stream.

No ingest runs here: the requests land in a fakeredis stream, where the test
reads them as the ingest would, and the answers are made up.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import redis

from fluxes import messages as proto
from fluxes.formats.jobspec import Jobspec
from fluxes.store.client import Client
from fluxes.store.instance import Instance, InstanceURI


class StreamClient:
    """A Client on fakeredis whose answers say every job was accepted."""

    def __init__(self, fake_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        self.redis = fake_redis
        self.client = Client(Instance(InstanceURI.parse("redis://localhost/0"),
                                      client=fake_redis), user="alice")
        monkeypatch.setattr(self.client, "_answers", self._answer)

    def requests(self) -> list[dict[str, Any]]:
        """Every request XADDed so far, as the ingest reads them."""
        stream = self.client.keys.submit("alice")
        return [orjson.loads(fields[b"d"]) for _id, fields in self.redis.xrange(stream)]

    def _answer(self, reply_key: str, timeout: float, count: int = 1) -> list[proto.Reply]:
        [request] = [r for r in self.requests()
                     if reply_key == self.client.keys.reply("alice", r["req"])]
        return [proto.Reply(jobs=[proto.JobResult(id=100 + i)
                                  for i in range(len(request["jobs"]))])]

    def submitted(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Submit ``items``; return the job items the ingest would receive."""
        assert all(isinstance(i, int) for i in self.client.submit(items))
        return [job for request in self.requests() for job in request["jobs"]]


@pytest.fixture
def stream_client(fake_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> StreamClient:
    """A client whose submissions can be read back from the stream."""
    return StreamClient(fake_redis, monkeypatch)


def test_jobspec_urgency_is_used_when_the_item_has_none(stream_client: StreamClient) -> None:
    spec = Jobspec.from_command(["app"], urgency=3)
    jobs = stream_client.submitted([{"jobspec": spec}, {"jobspec": spec, "urgency": None}])
    assert [job["urgency"] for job in jobs] == [3, 3]
    # the document goes on the wire, not the object
    assert jobs[0]["jobspec"] == spec.to_dict()


def test_explicit_urgency_wins(stream_client: StreamClient) -> None:
    spec = Jobspec.from_command(["app"], urgency=3)
    jobs = stream_client.submitted([{"jobspec": spec, "urgency": 0},
                                    {"jobspec": spec, "urgency": 20, "flags": 0}])
    # flags 0 is the default: not on the wire
    assert [(job["urgency"], job.get("flags")) for job in jobs] == [(0, None), (20, None)]


def test_no_urgency_anywhere_leaves_it_to_the_instance(stream_client: StreamClient) -> None:
    # The ingest applies its default (16) to an item without "urgency";
    # a null would be refused, so it must not be sent.
    plain = Jobspec.from_command(["app"])
    items: list[dict[str, Any]] = [{"jobspec": plain}, {"jobspec": plain.to_dict()},
                                   {"jobspec": plain.to_dict(), "urgency": None}]
    jobs = stream_client.submitted(items)
    assert all("urgency" not in job for job in jobs)
    # a document (not a Jobspec) keeps its explicit urgency and is not changed
    jobs = stream_client.submitted([{"jobspec": plain.to_dict(), "urgency": 7}])
    assert jobs[-1]["urgency"] == 7
    assert items[2] == {"jobspec": plain.to_dict(), "urgency": None}
