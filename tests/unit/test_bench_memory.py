"""fluxes bench memory: every key of a pending job is counted under its kind."""

from __future__ import annotations

from fluxes.bench.memory import kind_of
from fluxes.store.keys import Keys


def test_key_kinds() -> None:
    for keys in (Keys("fx"), Keys("fx", 4)):
        jobid = 1 << 40
        part = keys.partition_of(jobid)
        assert kind_of(keys.job(jobid)) == "job hash"
        assert kind_of(keys.eventlog(jobid)) == "eventlog"
        assert kind_of(keys.journal(part)) == "journal"
        assert kind_of(keys.joblist_jobs(part)) == kind_of(keys.joblist_active(part)) == \
            "read model"
        assert kind_of(keys.submit("alice")) == "submit stream"
        assert kind_of(keys.jm_new(part)) == "jm:new"
        assert kind_of(keys.blob(part, 1000, "00ff")) == "blobs"
        assert kind_of(keys.checkpoint(part)) == "checkpoint"
        assert kind_of(keys.private(part, 1000, jobid)) == "private"
        assert kind_of(keys.private_salt) == "other"
        assert kind_of(f"{keys.p(part)}:acct:open") == "accounting"
        assert kind_of(keys.sched_req(part)) == kind_of(keys.workers) == "other"
