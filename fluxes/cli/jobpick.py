"""``fluxes jobs``: the options that narrow, order and color the listed jobs
(``--name``, ``-i``, ``--sort``, ``--color``), as flux's."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import UsageError
from fluxes.formats.hostlist import Hostlist

if TYPE_CHECKING:
    from fluxes.cli.cmd_jobs import Row
    from fluxes.domain.job.record import JobRecord
    from fluxes.formats.idset import IDSet


#: ANSI colors of ``--color`` lines by result (as flux: done green, failed and
#: timed out bold red, canceled grey); active jobs keep the terminal's color.
_COLORS = {"COMPLETED": "\033[01;32m", "FAILED": "\033[01;31m", "TIMEOUT": "\033[01;31m",
           "CANCELED": "\033[37m"}
_RESET = "\033[0;0m"


def painter(when: str) -> Any:
    """A function coloring a row's line as ``--color=WHEN`` asks (auto: on a terminal)."""
    enabled = when == "always" or (when == "auto" and sys.stdout.isatty())

    def paint(row: Row, line: str) -> str:
        color = _COLORS.get(row.result or "") if enabled else None
        return f"{color}{line}{_RESET}" if color else line

    return paint


def sort_fields(text: str | None) -> list[tuple[str, bool]]:
    """``--sort``'s fields, each with True when reversed (a leading ``-``)."""
    if not text:
        return []
    keys = []
    for part in text.split(","):
        field = part.strip()
        reverse = field.startswith("-")
        field = field.lstrip("-")
        if field not in SORT_FIELDS:
            raise UsageError(f"fluxes jobs: --sort: unknown field {field!r} "
                             f"(known: {', '.join(sorted(SORT_FIELDS))})")
        keys.append((field, reverse))
    return keys


#: Fields ``--sort`` may order by: the row's plain values.
SORT_FIELDS = frozenset({
    "id", "userid", "username", "name", "queue", "bank", "state", "result",
    "status", "status_abbrev", "state_single", "result_abbrev", "ntasks", "nnodes",
    "ncores", "priority", "urgency", "nodelist", "ranks", "exit_code", "returncode",
    "waitstatus", "duration", "t_submit", "t_depend", "t_priority", "t_sched", "t_run",
    "t_cleanup", "t_inactive", "runtime", "expiration", "t_remaining", "cwd", "project",
    "inactive_reason", "contextual_time", "contextual_info", "success",
    "t_forecast",  # the forecast start (docs/forecast.md), computed when sorted by
})


def sorted_rows(records: list[JobRecord], rows: list[Row], keys: list[tuple[str, bool]]
            ) -> tuple[list[JobRecord], list[Row]]:
    """Records and rows ordered by ``keys``, the first key first; a missing value
    (a time not reached, an empty text) sorts after every present one either way."""
    pairs = list(zip(records, rows, strict=True))
    for field, reverse in reversed(keys):
        valued = [(getattr(p[1], field), p) for p in pairs]
        present = [(v, p) for v, p in valued if v not in (None, "")]
        absent = [p for v, p in valued if v in (None, "")]
        present.sort(key=lambda vp: _sort_value(vp[0]), reverse=reverse)
        pairs = [p for _v, p in present] + absent
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _sort_value(value: Any) -> tuple[int, Any]:
    """Numbers before texts, so a column mixing them still sorts."""
    if isinstance(value, bool | int | float):
        return 0, float(value)
    return 1, str(value)


def hosts_or_ranks(text: str | None) -> tuple[IDSet | None, Hostlist | None]:
    """``-i``'s ranks (an idset) or hosts (a hostlist)."""
    from fluxes.formats.idset import IDSet

    if text is None:
        return None, None
    try:
        if text and all(c.isdigit() or c in ",-[]" for c in text):
            return IDSet(text), None
        return None, Hostlist(text)
    except ValueError as exc:
        raise UsageError(f"fluxes jobs: -i {text!r}: {exc}") from None


def refine(records: list[JobRecord], name: str | None,
           include: tuple[IDSet | None, Hostlist | None], count: int | None
           ) -> list[JobRecord]:
    """``--name`` and ``-i`` applied to ``records``, then ``-c``."""
    ranks, hosts = include
    if name is None and ranks is None and hosts is None:
        return records
    out = []
    for rec in records:
        if name is not None and rec.info.get("name") != name:
            continue
        if ranks is not None and ranks.isdisjoint(_ranks_of(rec)):
            continue
        if hosts is not None and not set(hosts) & set(_hosts_of(rec)):
            continue
        out.append(rec)
    return out[:count] if count else out


def _ranks_of(rec: JobRecord) -> list[int]:
    from fluxes.formats.idset import IDSet

    try:
        return list(IDSet(str(rec.info.get("ranks") or "")))
    except ValueError:
        return []


def _hosts_of(rec: JobRecord) -> list[str]:
    try:
        return list(Hostlist(str(rec.info.get("nodelist") or "")))
    except ValueError:
        return []
