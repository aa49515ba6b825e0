"""Running simulations end to end: load a workload, run policies, write the schedule.

What ``fluxes simulate`` and ``fluxes bench simulate`` call; every piece is
also usable alone (see :mod:`fluxes.sim`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.banks import Accounts
from fluxes.sim.engine import Outcome, Simulation
from fluxes.sim.journal import Writer, read_records
from fluxes.sim.swf import FIELDS, SwfJob, Trace, format_line, number, parse, write
from fluxes.sim.workload import Machine, SimJob, jobs_from_journal, jobs_from_swf

__all__ = ["POLICY_KEYS", "Workload", "load_journal", "load_swf", "parse_queue_map",
           "simulate", "write_schedule"]

#: The command line's per-run scheduler settings (QueuePolicy fields).
POLICY_KEYS: Final = ("policy", "queue_depth", "reservation_depth", "placement")


@dataclass
class Workload:
    """The jobs to simulate and what reading them skipped or fixed."""

    jobs: list[SimJob]
    skipped: Counter[str] = field(default_factory=Counter)
    fixed: Counter[str] = field(default_factory=Counter)
    #: the SWF trace the jobs came from (None for a journal)
    trace: Trace | None = None
    whole_nodes: bool = False

    def inputs(self) -> dict[str, dict[str, int]]:
        """What the report says about the input."""
        return {"skipped": dict(self.skipped.most_common()),
                "fixed": dict(self.fixed.most_common())}


def parse_queue_map(text: str | None) -> dict[int, str]:
    """``1=batch,2=debug``: SWF queue numbers to fluxes queue names; ValueError if bad."""
    out: dict[int, str] = {}
    if not text:
        return out
    for item in text.split(","):
        number, sep, name = item.partition("=")
        try:
            key = int(number)
        except ValueError:
            key = -1
        if not sep or key < 0 or not name.strip():
            raise ValueError(f"--queue-map: expected NUMBER=QUEUE, got {item!r}")
        out[key] = name.strip()
    return out


def load_swf(stream: Iterable[str], queue_map: Mapping[int, str] | None = None,
             whole_nodes: bool = False) -> Workload:
    """Read an SWF trace (lines)."""
    trace = parse(stream)
    jobs = jobs_from_swf(trace, queue_map, whole_nodes)
    return Workload(jobs, Counter(trace.skipped), Counter(trace.fixed), trace, whole_nodes)


def load_journal(lines: Iterable[bytes | str] | None = None,
                 records: Iterable[Mapping[str, Any]] | None = None,
                 since: float | None = None, until: float | None = None) -> Workload:
    """Read a history: export-format ``lines`` or already decoded ``records``; only jobs
    submitted in ``[since, until]`` when given."""
    skipped: Counter[str] = Counter()
    if records is None:
        records = read_records(lines or (), errors=skipped)
    jobs = jobs_from_journal(records, skipped)
    if since is not None or until is not None:
        lo = since if since is not None else -math.inf
        hi = until if until is not None else math.inf
        kept = [j for j in jobs if lo <= j.submit <= hi]
        if len(kept) != len(jobs):
            skipped["submitted outside --since/--until"] += len(jobs) - len(kept)
        jobs = kept
    return Workload(jobs, skipped)


def simulate(workload: Workload, machine: Machine, config: InstanceConfig,
             overrides: Mapping[str, Any], *, label: str, annotations: bool = False,
             journal_out: str | Path | None = None, accounts: Accounts | None = None,
             progress: Callable[[int, int], None] | None = None) -> Outcome:
    """One run of ``workload`` (``overrides``: the policy settings given on the command
    line), its journal written to ``journal_out`` when given; ``accounts``: the banks
    (:func:`fluxes.sim.accounting.read_banks`)."""
    if journal_out is None:
        return Simulation(workload.jobs, machine, config, overrides=overrides, label=label,
                          annotations=annotations, accounts=accounts,
                          progress=progress).run()
    with open(journal_out, "wb") as out:
        return Simulation(workload.jobs, machine, config, overrides=overrides, label=label,
                          annotations=annotations, writer=Writer(out), accounts=accounts,
                          progress=progress).run()


def _swf_fields(job: SimJob, base: float) -> tuple[str, ...]:
    """SWF fields for a job that has no line of its own (journal input)."""
    status = {"completed": "1", "failed": "0", "canceled": "5"}.get(job.outcome, "-1")
    cols = [str(job.id), number(job.submit - base), "-1", "-1", str(job.size), "-1", "-1",
            str(job.size), number(job.requested) if job.requested else "-1", "-1", status,
            str(job.userid), "-1", "-1", "-1", "-1", "-1", "-1"]
    return tuple(cols[:FIELDS])


def write_schedule(out: TextIO, workload: Workload, outcome: Outcome) -> int:
    """Write the simulated schedule as SWF: the input's header and lines, column 3 the
    simulated wait, 4 the run time, 5 the processors used (nodes in whole-node mode);
    -1 for a job that never ran. Jobs the simulation did not run are left out (a header
    note counts them). Returns the number of job lines."""
    trace = workload.trace
    base = trace.start_time if trace is not None else float(math.floor(min(
        (j.submit for j in workload.jobs), default=0.0)))
    comments = list(trace.comments) if trace is not None else [
        "; Version: 2.2", "; Computer: fluxes instance (from its journal)",
        f"; UnixStartTime: {base:.0f}"]
    comments.append(f"; Note: schedule simulated by fluxes simulate ({outcome.label}, "
                    f"{outcome.machine.description}); columns 3-5 are simulated")
    left = sum(workload.skipped.values()) + sum(outcome.refused.values())
    if left:
        comments.append(f"; Note: {left} jobs of the input are not here (skipped when read, "
                        "or refused by the ingest)")
    lines = []
    for run in sorted(outcome.runs, key=lambda r: (r.job.submit, r.job.id)):
        job = run.job
        sj = trace.jobs[job.line] if trace is not None and job.line >= 0 else None
        if sj is None:
            sj = SwfJob(job.id, job.submit - base, job.runtime, job.size, job.requested, -1,
                        job.userid, -1, -1, -1, _swf_fields(job, base))
        if run.start is None or run.end is None:
            lines.append(format_line(sj, -1, -1, -1))
            continue
        procs = len(run.masks or {}) if workload.whole_nodes else run.ncores
        lines.append(format_line(sj, run.start - job.submit, run.end - run.start, procs))
    write(out, comments, lines)
    return len(lines)
