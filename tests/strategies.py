"""Hypothesis strategies shared by the unit and store tests."""

from __future__ import annotations

from hypothesis import strategies as st

from fluxes.domain.job import events as ev
from fluxes.domain.job.model import Job, TransitionError, apply

T = 1000.0
SUBMIT = ev.decode("submit", T, {"urgency": 16, "userid": 1000, "flags": 0, "version": 1})

def _candidates(job: Job, draw: st.DrawFn) -> list[ev.Event]:
    t = T + job.seq
    desc = draw(st.sampled_from(["a", "b"]))
    cands = [
        ev.decode("validate", t), ev.decode("depend", t),
        ev.decode("priority", t, {"priority": draw(st.integers(0, 2**32 - 1))}),
        ev.decode("urgency", t, {"urgency": draw(st.integers(0, 31)), "userid": 1}),
        ev.decode("flux-restart", t), ev.decode("alloc", t), ev.decode("start", t),
        ev.decode("finish", t, {"status": draw(st.sampled_from([0, 256, 9]))}),
        ev.decode("release", t, {"ranks": "all", "final": draw(st.booleans())}),
        ev.decode("free", t), ev.decode("clean", t),
        ev.decode("exception", t, {"type": draw(st.sampled_from(["cancel", "timelimit", "x"])),
                                   "severity": draw(st.sampled_from([0, 0, 4])), "note": ""}),
        ev.decode("dependency-add", t, {"description": desc}),
        ev.decode("dependency-remove", t, {"description": desc}),
        ev.decode("prolog-start", t, {"description": desc}),
        ev.decode("prolog-finish", t, {"description": desc, "status": 0}),
        ev.decode("epilog-start", t, {"description": desc}),
        ev.decode("epilog-finish", t, {"description": desc, "status": 0}),
        ev.decode("memo", t, {"k": draw(st.one_of(st.none(), st.integers(-(2**31), 2**31)))}),
        ev.decode("annotations", t, {"annotations": {"sched": {"x": draw(st.integers(-(2**31), 2**31))}}}),
        ev.decode("jobspec-update", t, {"attributes.system.duration": 5}),
        ev.decode("debug.x", t), ev.decode("other", t, {"z": 1}),
    ]
    valid = []
    for cand in cands:
        try:
            apply(cand, job)
        except TransitionError:
            continue
        valid.append(cand)
    return valid


@st.composite
def histories(draw: st.DrawFn, jobid: int = 7) -> list[ev.Event]:
    """A random valid event history of one job, starting with submit."""
    job = apply(SUBMIT, Job(jobid))
    log: list[ev.Event] = [SUBMIT]
    for _ in range(draw(st.integers(0, 40))):
        valid = _candidates(job, draw)
        if not valid:
            break
        event = draw(st.sampled_from(valid))
        job = apply(event, job)
        log.append(event)
    return log


