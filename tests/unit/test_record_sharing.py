"""Jobs submitted together share one info dict (fluxes/domain/job/record.py)."""

from __future__ import annotations

from fluxes.domain.job import events as ev
from fluxes.domain.job.record import apply_record, shared_info


def _submit() -> ev.Event:
    return ev.Submit(timestamp=1.0, userid=1000, urgency=16, flags=0, version=1)


def test_new_jobs_with_equal_facts_share_their_info_and_changes_copy_it() -> None:
    facts = {"name": "true", "ntasks": 1, "dependencies": [], "cwd": "/tmp"}
    a = apply_record(None, 1, _submit(), dict(facts))
    b = apply_record(None, 2, _submit(), dict(facts))
    assert a.info is b.info and a.info == facts
    c = apply_record(None, 3, _submit(), {**facts, "name": "other"})
    assert c.info is not a.info and c.info["name"] == "other"
    # a later fact makes a new dict: the shared one is never changed
    later = apply_record(a, 1, ev.Validate(timestamp=2.0), {"ranks": "0"})
    assert later.info is not a.info and "ranks" not in a.info and b.info == facts


def test_unencodable_facts_are_copied_not_shared() -> None:
    facts = {"x": object()}
    assert shared_info(facts) is not shared_info(facts)
