"""``fluxes jobs -o FORMAT``: flux's job format language over the fields of a job row.

A format is a Python format string with flux's additions:

* conversions ``!D`` (a timestamp as ISO 8601 local date and time), ``!d``
  (a timestamp as a datetime, so ``{t_run!d:%H:%M}`` works), ``!F`` (a
  duration in RFC 23 form) and ``!H`` (a duration as ``H:MM:SS``); a
  missing value gives an empty string;
* the ``h`` suffix of a spec (``{nnodes:>6h}``) prints ``-`` for an empty
  value;
* annotation fields: ``{annotations.sched.reason_pending}``, with ``sched.``
  and ``user.`` short for ``annotations.sched.`` and ``annotations.user.``; a
  missing key gives an empty string;
* a ``?:`` before a field (``?:{queue:<8.8}``) drops that column, with the
  text before it, when it is empty for every listed job.

Everything is checked before anything is printed, so a bad format gives one
error line and no header.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from fluxes.formats import jobid as jobids
from fluxes.formats.fsd import format_duration

#: Column titles; a field not listed here is titled by its name in upper case.
HEADERS = {
    "id": "JOBID", "id.f58": "JOBID", "id.dec": "JOBID", "id.hex": "JOBID", "queue": "QUEUE",
    "username": "USER", "userid": "UID", "name": "NAME", "status_abbrev": "ST",
    "status": "STATUS", "state": "STATE", "result": "RESULT", "ntasks": "NTASKS",
    "nnodes": "NNODES", "ncores": "NCORES", "contextual_time": "TIME",
    "contextual_info": "INFO", "priority": "PRI", "urgency": "URG",
    "runtime_text": "RUNTIME", "nodelist": "NODELIST", "exit_code": "EXIT",
    "duration_text": "LIMIT", "t_submit_text": "SUBMITTED", "returncode": "RC",
    "waitstatus": "WSTATUS", "instance": "INSTANCE", "instance_stats": "INSTANCE-JOBS",
    "bank": "BANK", "state_single": "S", "result_abbrev": "RS", "success": "SUCCESS",
    "ranks": "RANKS", "uri": "URI", "cwd": "CWD", "project": "PROJECT",
    "dependencies": "DEPENDENCIES", "t_priority": "T_PRIORITY", "t_sched": "T_SCHED",
    "expiration": "EXPIRATION", "t_remaining": "T_REMAINING",
    "inactive_reason": "INACTIVE-REASON", "exception.occurred": "EXCEPTION-OCCURRED",
    "exception.severity": "EXCEPTION-SEVERITY", "exception.type": "EXCEPTION-TYPE",
    "exception.note": "EXCEPTION-NOTE",
    "id.f58plain": "JOBID", "id.dothex": "JOBID", "id.kvs": "JOBID", "id.words": "JOBID",
    "sched.reason_pending": "REASON", "annotations.sched.reason_pending": "REASON",
    "sched.t_estimate": "T_ESTIMATE", "annotations.sched.t_estimate": "T_ESTIMATE",
    "sched.resource_summary": "RESOURCES", "annotations.sched.resource_summary": "RESOURCES",
    "t_forecast": "START",
}

#: Fields a format may name besides those with a title above.
FIELDS = frozenset(HEADERS) | {
    "t_submit", "t_depend", "t_run", "t_cleanup", "t_inactive", "runtime", "duration",
    "annotations", "sched", "user", "exception",
}

#: Fields whose dotted names reach into the job's annotations, and where they start.
_ANNOTATION_ROOTS = {"annotations": (), "sched": ("sched",), "user": ("user",)}

CONVERSIONS = ("s", "r", "a", "D", "d", "F", "H")

#: How a spec starts: fill and alignment, sign and the like, then the width.
_SPEC_HEAD = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>=^]))?[-+ ]?z?#?0?(?P<width>\d*)")


class FormatError(ValueError):
    """A format that cannot be used: an unknown field, conversion or spec."""


class _Datetime(dt.datetime):
    """A datetime that formats with a strftime spec (empty: ISO 8601)."""

    def __format__(self, spec: str) -> str:
        return self.strftime(spec or "%Y-%m-%dT%H:%M:%S")


class _NoTime:
    """``!d`` of a time that did not happen: empty whatever the strftime spec."""

    def __format__(self, spec: str) -> str:
        return ""

    def __str__(self) -> str:
        return ""


def _missing(value: Any) -> bool:
    return value is None or value == ""


def _timestamp(value: Any, conv: str) -> Any:
    if value == "-":
        return "-"  # a time that will not come (a forecast start that never is)
    if _missing(value) or not value:
        # never a 1970 date for a time that did not happen
        return _NoTime() if conv == "d" else ""
    if conv == "d":
        return _Datetime.fromtimestamp(float(value))
    return dt.datetime.fromtimestamp(float(value)).strftime("%Y-%m-%dT%H:%M:%S")


def _hms(value: Any) -> str:
    if _missing(value):
        return ""
    seconds = float(value)
    if 0 < seconds < 1:
        seconds = 1  # a job that ran is never shown as having run for nothing
    return str(dt.timedelta(seconds=round(seconds)))


def _fsd(value: Any) -> str:
    if _missing(value):
        return ""
    seconds = float(value)
    return "inf" if math.isinf(seconds) else format_duration(seconds)


class JobFormatter(string.Formatter):
    """``string.Formatter`` with flux's fields, conversions and ``h`` suffix."""

    def get_field(self, field_name: str, args: Sequence[Any],
                  kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        """Resolve ``id.FORM``, annotation paths and plain field names."""
        head, _, rest = field_name.partition(".")
        if head == "exception" and rest:
            return kwargs.get("exception", {}).get(rest, ""), field_name
        if head in _ANNOTATION_ROOTS:
            path = (*_ANNOTATION_ROOTS[head], *(rest.split(".") if rest else ()))
            return _annotation(kwargs.get("annotations"), path), field_name
        if head == "id" and rest:
            return jobids.encode(int(kwargs["id"]), rest), field_name
        if field_name not in kwargs:
            raise FormatError(f"unknown field {field_name!r}")
        value = kwargs[field_name]
        return ("" if value is None else value), field_name

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        """flux's ``!D``, ``!d``, ``!F`` and ``!H``; Python's own otherwise."""
        if conversion in ("D", "d"):
            return _timestamp(value, conversion)
        if conversion == "F":
            return _fsd(value)
        if conversion == "H":
            return _hms(value)
        return super().convert_field(value, conversion)

    def format_field(self, value: Any, format_spec: str) -> str:
        """Apply ``format_spec``; a trailing ``h`` shows an empty value as ``-``."""
        if format_spec.endswith("h") and not isinstance(value, dt.datetime | _NoTime):
            text = str(value)
            value = "-" if text in ("", "0s", "0.0", "0:00:00") else text
            format_spec = format_spec[:-1]
        return str(super().format_field(value, format_spec))


def _annotation(annotations: Any, path: Sequence[str]) -> Any:
    node = annotations
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return ""
        node = node[key]
    if node is None:
        return ""
    if isinstance(node, Mapping | list):
        return orjson.dumps(node).decode() if node else ""
    return node


def title(field: str) -> str:
    """The column title of ``field``."""
    if field in HEADERS:
        return HEADERS[field]
    return field.rsplit(".", 1)[-1].upper() if field.startswith(("annotations.", "sched.",
                                                                  "user.")) \
        else field.upper()


def _header_spec(spec: str) -> str:
    """The part of ``spec`` a title can use: alignment and width."""
    match = _SPEC_HEAD.match(spec)
    if match is None:
        return ""
    align = match.group("align") or ""
    fill = match.group("fill") or "" if align else ""
    if align == "=":
        align = ">"  # numeric-only alignment; a title is text
    return f"{fill}{align}{match.group('width')}"


class JobFormat:
    """A parsed, checked format: renders a header and one line per row."""

    def __init__(self, fmt: str) -> None:
        try:
            parsed = list(string.Formatter().parse(fmt))
        except ValueError as exc:
            raise FormatError(f"bad format {fmt!r}: {exc}") from None
        # (literal, field, spec, conversion, optional)
        self.parts: list[tuple[str, str | None, str, str | None, bool]] = []
        for text, field, spec, conv in parsed:
            optional = field is not None and text.endswith("?:")
            if field is not None:
                _check_field(field, conv)
            self.parts.append((text[:-2] if optional else text, field, spec or "", conv,
                               optional))
        self.formatter = JobFormatter()

    def _value(self, row: Mapping[str, Any], field: str, spec: str, conv: str | None) -> str:
        value, _ = self.formatter.get_field(field, (), row)
        value = self.formatter.convert_field(value, conv)
        return self.formatter.format_field(value, spec)

    def render(self, rows: Iterable[Mapping[str, Any]]) -> tuple[str, list[str]]:
        """The header and the lines for ``rows``; FormatError if a value does not format."""
        rows = list(rows)
        try:
            parts: list[tuple[str, str | None, str, str | None, bool]] = []
            for literal, field, spec, conv, optional in self.parts:
                if optional and not any(self._value(row, field or "", "", conv).strip()
                                        for row in rows):
                    if literal.strip():
                        parts.append((literal, None, "", None, False))  # keep real text
                    continue
                parts.append((literal, field, spec, conv, optional))
            lines = []
            for row in rows:
                out = []
                for literal, field, spec, conv, _optional in parts:
                    out.append(literal)
                    if field is not None:
                        out.append(self._value(row, field, spec, conv))
                lines.append("".join(out).rstrip())
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else \
                type(exc).__name__
            raise FormatError(f"bad format: {message}") from None
        header = "".join(literal + (format(title(field), _header_spec(spec)) if field else "")
                         for literal, field, spec, _conv, _opt in parts).rstrip()
        return header, lines

    def render_csv(self, rows: Iterable[Mapping[str, Any]]) -> list[list[str]]:
        """The format's fields as CSV records (``--csv``): a header of titles, then one
        record per row, each value formatted (conversions applied) without padding;
        the literal text between fields is left out. FormatError as :meth:`render`."""
        fields = [(field, spec, conv) for _lit, field, spec, conv, _opt in self.parts
                  if field is not None]
        out = [[title(field) for field, _spec, _conv in fields]]
        try:
            for row in rows:
                out.append([self._value(row, field, spec, conv).strip()
                             for field, spec, conv in fields])
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else \
                type(exc).__name__
            raise FormatError(f"bad format: {message}") from None
        return out


def _check_field(field: str, conv: str | None) -> None:
    """FormatError unless ``field`` and ``conv`` are known."""
    if conv is not None and conv not in CONVERSIONS:
        raise FormatError(f"unknown conversion '!{conv}' in format (known: "
                          f"{', '.join('!' + c for c in CONVERSIONS)})")
    head, _, form = field.partition(".")
    if head == "id":
        if form and form not in jobids.OUTPUT_FORMS:
            raise FormatError(f"unknown id encoding {form!r} in format "
                              f"(known: {', '.join(jobids.OUTPUT_FORMS)})")
        return
    if head in _ANNOTATION_ROOTS:
        if any(not key for key in form.split(".")) and form:
            raise FormatError(f"bad annotation field {field!r} in format")
        return
    if field not in FIELDS:
        known = [*sorted(f for f in FIELDS if "." not in f), "annotations.KEY...",
                 "sched.KEY", "user.KEY"]
        raise FormatError(f"unknown field {field!r} in format (known: {', '.join(known)})")
