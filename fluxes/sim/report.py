"""The text report of ``fluxes simulate`` (``--json`` prints the summaries themselves)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["compare_text", "duration", "report_text"]

#: Users listed in the text report (the JSON has them all).
TOP_USERS: Final = 10
#: Refusal reasons listed in the text report.
TOP_REASONS: Final = 5


def duration(seconds: float) -> str:
    """A compact duration: ``45s``, ``5m07s``, ``3h02m``, ``2d04h``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s" if seconds >= 1 or seconds == 0 else f"{seconds:.2f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    out = []
    for row in [header, *rows]:
        cells = [str(c).ljust(w) if i == 0 else str(c).rjust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def _group_rows(groups: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for name, g in groups.items():
        w = g["wait"]
        rows.append([name, f"{g['jobs']:,}", f"{g['ran']:,}", duration(w["mean"]),
                     duration(w["median"]), duration(w["p95"]), duration(w["max"]),
                     f"{g['bounded_slowdown']:.2f}", f"{g['core_hours']:,.1f}"])
    return rows


_GROUP_HEADER: Final = ("", "jobs", "ran", "mean wait", "median", "p95", "max", "bsld",
                        "core-h")


def _counts(counts: Mapping[str, int]) -> str:
    return "; ".join(f"{n:,} {why}" for why, n in counts.items())


def report_text(summary: Mapping[str, Any], inputs: Mapping[str, Any] | None = None
                ) -> list[str]:
    """The report of one run, as lines (``inputs``: what reading the workload skipped
    and fixed)."""
    jobs = summary["jobs"]
    wait = summary["wait"]
    lines = [f"policy      {summary['label']} on {summary['machine']['description']}"]
    for queue, policy in summary["policies"].items():
        lines.append(f"            queue {queue}: {policy}")
    lines.append(f"jobs        {jobs['simulated']:,} simulated, {jobs['ran']:,} ran")
    _add_refused(lines, jobs)
    lines.append("            results: " + ", ".join(f"{name} {n:,}" for name, n in
                                                    jobs["results"].items()))
    if inputs:
        skipped = inputs.get("skipped") or {}
        fixed = inputs.get("fixed") or {}
        if skipped:
            lines.append(f"input       {sum(skipped.values()):,} skipped: {_counts(skipped)}")
        if fixed:
            lines.append(f"            {sum(fixed.values()):,} fixed: {_counts(fixed)}")
    lines.append(f"makespan    {duration(summary['makespan'])} "
                 f"({summary['makespan']:,.0f} s)")
    lines.append(f"utilization {summary['utilization'] * 100:.1f}%")
    lines.append(f"wait        mean {duration(wait['mean'])}, median {duration(wait['median'])}"
                 f", p95 {duration(wait['p95'])}, max {duration(wait['max'])}")
    lines.append(f"slowdown    mean bounded slowdown {summary['bounded_slowdown']['mean']:.2f}"
                 f" (tau {summary['bounded_slowdown']['tau']:g} s)")
    lines.append("per queue")
    lines.extend(_table(_GROUP_HEADER, _group_rows(summary["queues"])))
    users = summary["users"]
    top = dict(sorted(users.items(), key=lambda kv: -kv[1]["core_hours"])[:TOP_USERS])
    more = f" ({TOP_USERS} of {len(users)} with the most core-hours; --json has all)" \
        if len(users) > TOP_USERS else ""
    lines.append(f"per user{more}")
    lines.extend(_table(_GROUP_HEADER, _group_rows(top)))
    lines.extend(_invariants(summary["invariants"]))
    sim = summary["simulation"]
    lines.append(f"simulated   in {sim['elapsed_s']:.1f} s: {sim['jobs_per_s']:,.0f} jobs/s, "
                 f"{sim['passes']:,} scheduling passes")
    return lines


def _add_refused(lines: list[str], jobs: Mapping[str, Any]) -> None:
    """Say on the ``jobs`` line (the last of ``lines``) how many jobs the ingest
    refused, and why on the next.

    Its checks depend on the machine and queues, not the policy, so every run
    of a comparison refused the same jobs and one report of them serves all.
    """
    if not jobs["refused"]:
        return
    reasons = jobs["refused_by_reason"]
    shown = dict(list(reasons.items())[:TOP_REASONS])
    more = f"; and {len(reasons) - len(shown)} more reasons (--json has all)" \
        if len(reasons) > len(shown) else ""
    lines[-1] += f", {jobs['refused']:,} refused by the ingest"
    lines.append(f"            refused: {_counts(shown)}{more}")


def _invariants(inv: Mapping[str, Any]) -> list[str]:
    res = inv.get("reservations", {})
    kept = (f"; reservations kept {res.get('kept', 0):,}, yielded to higher priority "
            f"{res.get('yielded', 0):,}")
    if inv["ok"]:
        return [f"invariants  ok{kept}"]
    lines = [f"invariants  VIOLATED: {_counts(inv['violations'])}{kept}"]
    lines.extend(f"            {example}" for example in inv["examples"])
    return lines


def compare_text(summaries: Sequence[Mapping[str, Any]],
                 inputs: Mapping[str, Any] | None = None) -> list[str]:
    """Several runs side by side, one column per run."""
    first = summaries[0]
    lines = [f"machine     {first['machine']['description']}",
             f"jobs        {first['jobs']['simulated']:,} simulated"]
    _add_refused(lines, first["jobs"])
    if inputs and inputs.get("skipped"):
        skipped = inputs["skipped"]
        lines.append(f"input       {sum(skipped.values()):,} skipped: {_counts(skipped)}")
    header = ["", *[s["label"] for s in summaries]]

    def row(name: str, get: Any) -> list[str]:
        """A table row: ``name``, then ``get`` of each run."""
        return [name, *[get(s) for s in summaries]]

    rows = [
        row("ran", lambda s: f"{s['jobs']['ran']:,}"),
        row("makespan", lambda s: duration(s["makespan"])),
        row("utilization", lambda s: f"{s['utilization'] * 100:.1f}%"),
        row("mean wait", lambda s: duration(s["wait"]["mean"])),
        row("median wait", lambda s: duration(s["wait"]["median"])),
        row("p95 wait", lambda s: duration(s["wait"]["p95"])),
        row("max wait", lambda s: duration(s["wait"]["max"])),
        row("mean bsld", lambda s: f"{s['bounded_slowdown']['mean']:.2f}"),
    ]
    queues = sorted({q for s in summaries for q in s["queues"]})
    for queue in queues:
        rows.append(row(f"queue {queue} mean wait", lambda s, q=queue: duration(
            s["queues"][q]["wait"]["mean"]) if q in s["queues"] else "-"))
    rows.append(row("invariants", lambda s: "ok" if s["invariants"]["ok"] else "VIOLATED"))
    rows.append(row("simulated in", lambda s: f"{s['simulation']['elapsed_s']:.1f} s"))
    lines.extend(_table(header, rows))
    for s in summaries:
        if not s["invariants"]["ok"]:
            lines.append(f"{s['label']}:")
            lines.extend(_invariants(s["invariants"]))
    return lines
