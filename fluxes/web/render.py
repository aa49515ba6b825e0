"""HTML of the pages of ``fluxes web``, from the documents of :mod:`fluxes.web.data`.

Plain server-side HTML (every value escaped here), with a small script of our
own (``static/fluxes.js``) for the time bar, the play mode and live updates;
no frontend build, no third-party code. Charts are inline SVG.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import urlencode

from fluxes.formats.fsd import brief_duration

#: Navigation: path, label.
PAGES = (("/", "Machine"), ("/queues", "Queues"), ("/jobs", "Jobs"), ("/gantt", "Gantt"),
         ("/usage", "Usage"))


def esc(value: Any) -> str:
    """``value`` as HTML text (None as empty)."""
    return "" if value is None else escape(str(value), quote=True)


def fmt_time(stamp: float | None) -> str:
    """A UNIX time as local date and time ("" for None)."""
    if stamp is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def fmt_seconds(seconds: float) -> str:
    """A duration as ``fluxes jobs`` shows one (``3.2s``, ``4.0m``, ``1.5h``)."""
    return brief_duration(seconds)


@dataclass
class Frame:
    """What every page's frame shows: who looks, when, the time bar's range."""

    path: str
    query: Mapping[str, str]
    user: str | None
    owner: bool
    csrf: str
    at: float | None
    #: the time bar's range (None: the index is not ready yet)
    first: float | None
    last: float | None
    purged_before: float | None = None
    flash: tuple[str, bool] | None = None

    def link(self, path: str, **params: Any) -> str:
        """``path`` with ``params`` and the moment looked at (escaped for an attribute)."""
        merged = {k: v for k, v in params.items() if v not in (None, "", False)}
        if self.at is not None and "at" not in params:
            merged["at"] = repr(self.at)
        query = urlencode(merged)
        return esc(path + ("?" + query if query else ""))

    def csrf_field(self) -> str:
        """The hidden field every form posts."""
        return f'<input type="hidden" name="csrf" value="{esc(self.csrf)}">'


def page(frame: Frame, title: str, body: str, live: bool = False) -> str:
    """A whole page: header, time bar, message, the body in ``<main>``."""
    nav = "".join(
        f'<a href="{frame.link(path)}"{" class=here" if path == frame.path else ""}>'
        f"{esc(label)}</a>" for path, label in PAGES)
    if frame.user is None:
        who = f'guest · <a href="{esc("/login?next=" + frame.path)}" id="login-link">log in</a>'
    else:
        role = " (instance owner)" if frame.owner else ""
        who = (f'<span id="who">{esc(frame.user)}{esc(role)}</span> '
               f'<form method="post" action="/logout" class="inline">{frame.csrf_field()}'
               f'<button type="submit">log out</button></form>')
    flash = ""
    if frame.flash is not None:
        text, error = frame.flash
        flash = f'<div class="flash{" error" if error else ""}" id="flash">{esc(text)}</div>'
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>fluxes · {esc(title)}</title>"
        '<link rel="stylesheet" href="/static/fluxes.css">'
        '<script src="/static/fluxes.js" defer></script></head>'
        f'<body data-page="{esc(frame.path)}" '
        f'data-at="{esc(repr(frame.at) if frame.at is not None else "")}"'
        f' data-live="{"1" if live and frame.at is None else ""}">'
        f'<header><a class="brand" href="{frame.link("/")}">fluxes</a><nav>{nav}</nav>'
        f'<div class="who">{who}</div></header>'
        f"{_timebar(frame)}{flash}"
        f'<main id="main"><h1>{esc(title)}</h1>{body}</main>'
        '<footer><span id="live-status"></span></footer></body></html>')


def _timebar(frame: Frame) -> str:
    hidden = "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                     for k, v in frame.query.items() if k not in ("at", "play"))
    now = time.time()
    first = frame.first if frame.first is not None else now - 3600
    value = frame.at if frame.at is not None else now
    disabled = "" if frame.first is not None else " disabled"
    if frame.at is None:
        status = '<span class="when live" id="when">now (live)</span>'
    else:
        status = (f'<span class="when past" id="when" data-t="{esc(repr(frame.at))}">'
                  f"as of {esc(fmt_time(frame.at))}</span>")
    purged = ""
    if frame.purged_before is not None:
        purged = (f'<span class="purged">history before {esc(fmt_time(frame.purged_before))}'
                  " was purged (retention): jobs purged by then are not shown</span>")
    return (
        f'<section class="timebar"><form id="timeform" method="get" '
        f'action="{esc(frame.path)}">{hidden}'
        f'<input type="range" id="slider" min="{int(first)}" max="{int(now) + 1}" '
        f'step="1" value="{int(value)}"{disabled} aria-label="time">'
        f'<input type="text" name="at" id="at" size="22" placeholder="now, -1h, ISO time" '
        f'value="{esc(fmt_time(frame.at) if frame.at is not None else "")}">'
        '<button type="submit">go</button>'
        f'<a href="{esc(frame.path + _query(frame.query, drop=("at", "play")))}" '
        'id="now-link">now</a>'
        '<button type="button" id="step-back" title="previous event">◀</button>'
        '<button type="button" id="play" title="step through events">▶ play</button>'
        '<button type="button" id="step-next" title="next event">▶|</button>'
        f"{status}{purged}</form></section>")


def _query(query: Mapping[str, str], drop: Sequence[str] = ()) -> str:
    kept = {k: v for k, v in query.items() if k not in drop}
    return "?" + urlencode(kept) if kept else ""


def _pre(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, indent=2, sort_keys=False)
    return f"<pre>{esc(text)}</pre>"


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "",
           tid: str = "") -> str:
    """A table whose cells are HTML already."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{esc(tid)}"' if tid else ""
    return (f'<table class="{esc(cls)}"{ident}><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


# ---------------------------------------------------------------- the machine


def _load_colour(node: Mapping[str, Any]) -> str:
    """green (idle) through amber to red (every core allocated)."""
    hue = int(130 * (1.0 - float(node["load"])))
    return f"hsl({hue}, 55%, {42 + 10 * (1 - float(node['load'])):.0f}%)"


def machine(frame: Frame, doc: Mapping[str, Any], queues_doc: Mapping[str, Any]) -> str:
    """The machine: a grid of nodes coloured by state and load, drained nodes with
    their reasons, and (for the instance owner, now) drain and undrain."""
    nodes = doc["nodes"]
    counts = ", ".join(f"{n} {esc(state)}" for state, n in sorted(doc["counts"].items()))
    parts = [f'<p class="summary">{len(nodes)} nodes ({counts}); '
             f'{doc["ncores_used"]} of {doc["ncores"]} cores allocated to '
             f'{doc["running_jobs"]} running jobs.</p>']
    if doc.get("drain_note"):
        parts.append(f'<p class="note">{esc(doc["drain_note"])}</p>')
    cells = []
    for node in nodes:
        style = f' style="background:{_load_colour(node)}"' \
            if node["state"] in ("free", "partly", "allocated") else ""
        tip = (f"{node['host']} (rank {node['rank']}): {node['state']}, "
               f"{node['cores_used']}/{node['cores']} cores"
               + (f", {node['gpus_used']}/{node['gpus']} GPUs" if node["gpus"] else "")
               + (f", drained: {node['reason']}" if node["state"] == "drained" else "")
               + (f"; jobs {' '.join(node['jobs'])}" if node["jobs"] else ""))
        cells.append(f'<div class="node {esc(node["state"])}" data-rank="{node["rank"]}" '
                     f'data-state="{esc(node["state"])}" title="{esc(tip)}"{style}>'
                     f'<b>{esc(node["host"])}</b><span>{node["cores_used"]}/{node["cores"]}'
                     "</span></div>")
    parts.append(f'<div class="grid" id="nodes">{"".join(cells)}</div>')
    parts.append('<p class="legend"><span class="node free sw"></span>free '
                 '<span class="node partly sw"></span>partly allocated '
                 '<span class="node allocated sw"></span>allocated '
                 '<span class="node drained sw"></span>drained '
                 '<span class="node offline sw"></span>offline '
                 "(colour: share of cores allocated)</p>")
    drained = [n for n in nodes if n["state"] == "drained"]
    can_act = frame.owner and frame.at is None
    if drained:
        rows = []
        for n in drained:
            action = ""
            if can_act:
                action = (f'<form method="post" action="/actions/undrain" class="inline">'
                          f'{frame.csrf_field()}<input type="hidden" name="targets" '
                          f'value="{n["rank"]}"><button type="submit" '
                          f'id="undrain-{n["rank"]}">undrain</button></form>')
            rows.append([esc(n["host"]), str(n["rank"]), esc(n["reason"] or ""), action])
        parts.append("<h2>Drained nodes</h2>" + _table(
            ["node", "rank", "reason", ""], rows, tid="drained"))
    if can_act:
        parts.append(
            '<h2>Drain</h2><form method="post" action="/actions/drain" id="drain-form">'
            f'{frame.csrf_field()}<label>nodes <input name="targets" id="drain-targets" '
            'placeholder="node[0-1] or 0-1" required></label> '
            '<label>reason <input name="reason" id="drain-reason"></label> '
            '<button type="submit" id="drain-button">drain</button></form>')
    parts.append("<h2>Queues</h2>" + _queue_table(frame, queues_doc, actions=False))
    return page(frame, "Machine", "".join(parts), live=True)


# ---------------------------------------------------------------- queues


def _queue_table(frame: Frame, doc: Mapping[str, Any], actions: bool) -> str:
    rows = []
    for q in doc["queues"]:
        enabled = "enabled" if q["enabled"] else \
            f"disabled{': ' + q['disable_reason'] if q['disable_reason'] else ''}"
        started = "started" if q["started"] else \
            f"stopped{': ' + q['stop_reason'] if q['stop_reason'] else ''}"
        reasons = "; ".join(f"{esc(r)} ({n})" for r, n in
                            sorted(q["reasons"].items(), key=lambda kv: -kv[1])[:3])
        row = [esc(q["label"]) + (" *" if q["default"] and len(doc["queues"]) > 1 else ""),
               f'<span class="{"ok" if q["enabled"] else "bad"}">{esc(enabled)}</span>',
               f'<span class="{"ok" if q["started"] else "bad"}">{esc(started)}</span>',
               str(q["pending"]), str(q["held"]), str(q["running"]), esc(q["time_limit"]),
               reasons]
        if actions:
            row.append(_queue_actions(frame, q))
        rows.append(row)
    headers = ["queue", "submission", "scheduling", "pending", "held", "running", "time limit",
               "why jobs wait"]
    if actions:
        headers.append("")
    return _table(headers, rows, tid="queues")


def _queue_actions(frame: Frame, q: Mapping[str, Any]) -> str:
    name = q["queue"] or ""
    label = q["label"]
    out = []
    for kind in ("stop" if q["started"] else "start",
                 "disable" if q["enabled"] else "enable"):
        reason = ""
        if kind in ("stop", "disable"):
            reason = '<input name="reason" placeholder="reason" size="12">'
        out.append(f'<form method="post" action="/actions/queue" class="inline">'
                   f'{frame.csrf_field()}<input type="hidden" name="queue" value="{esc(name)}">'
                   f'<input type="hidden" name="kind" value="{kind}">{reason}'
                   f'<button type="submit" id="{kind}-{esc(label)}">{kind}</button></form>')
    return " ".join(out)


def queues(frame: Frame, doc: Mapping[str, Any]) -> str:
    """The queues: RFC 33 state with reasons, pending, held and running counts, and (for
    the instance owner, now) start/stop and enable/disable."""
    body = _queue_table(frame, doc, actions=frame.owner and frame.at is None)
    return page(frame, "Queues", body, live=True)


# ---------------------------------------------------------------- jobs


def job_rows(frame: Frame, jobs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Rows of the jobs table (HTML cells)."""
    rows = []
    for j in jobs:
        status = j.get("result") or j.get("state") or ""
        rows.append([
            f'<a href="{frame.link("/jobs/" + j["f58"])}" class="jobid">{esc(j["f58"])}</a>',
            esc(j.get("queue") or ""), esc(j.get("username")), esc(j.get("name")),
            f'<span class="st st-{esc(status.lower())}">{esc(j.get("status_abbrev"))}</span>',
            str(j.get("ntasks") or ""), str(j.get("nnodes") or ""),
            esc(j.get("contextual_time")), esc(j.get("contextual_info"))])
    return rows


def jobs(frame: Frame, doc: Mapping[str, Any], queue_names: Sequence[str | None]) -> str:
    """The jobs table, filtered like ``fluxes jobs``, updated live."""
    f = doc["filters"]
    chosen = f["queue"]
    options = ['<option value="">any queue</option>'] + [
        f'<option value="{esc(q or "")}"{" selected" if chosen and (q or "") == chosen else ""}>'
        f"{esc(q or '(default)')}</option>" for q in queue_names if q is not None]
    at_field = f'<input type="hidden" name="at" value="{esc(repr(frame.at))}">' \
        if frame.at is not None else ""
    form = (f'<form method="get" action="/jobs" class="filters" id="filters">{at_field}'
            f'<label><input type="checkbox" name="all" value="1"{" checked" if f["all"] else ""}>'
            " inactive too</label> "
            f'<label>user <input name="user" size="10" value="{esc(f["user"])}"></label> '
            f'<label>queue <select name="queue">{"".join(options)}</select></label> '
            f'<label>states <input name="states" size="18" placeholder="pending,running" '
            f'value="{esc(f["states"])}"></label> '
            f'<label>limit <input name="limit" size="5" value="{doc["limit"]}"></label> '
            '<button type="submit">filter</button></form>')
    table = _table(["JOBID", "QUEUE", "USER", "NAME", "ST", "NTASKS", "NNODES", "TIME", "INFO"],
                   job_rows(frame, doc["jobs"]), cls="jobs", tid="jobs")
    more = f'<p class="note">more jobs match: showing the first {doc["limit"]}</p>' \
        if doc["truncated"] else ""
    count = f'<p class="summary" id="job-count">{len(doc["jobs"])} jobs</p>'
    return page(frame, "Jobs", form + count + table + more, live=True)


# ---------------------------------------------------------------- one job

#: The times a job entered each state (RFC 21), in the order of its life.
_STATE_TIMES = (("NEW", "t_submit"), ("DEPEND", "t_depend"), ("PRIORITY", "t_priority"),
                ("SCHED", "t_sched"), ("RUN", "t_run"), ("CLEANUP", "t_cleanup"),
                ("INACTIVE", "t_inactive"))


def _life_bar(row: Mapping[str, Any], until: float) -> str:
    """The job's states over time as one horizontal bar (SVG)."""
    marks = [(name, float(row[key])) for name, key in _STATE_TIMES
             if isinstance(row.get(key), int | float)]
    if not marks:
        return ""
    end = marks[-1][1] if marks[-1][0] == "INACTIVE" else max(until, marks[-1][1])
    span = max(end - marks[0][1], 1e-6)
    out = []
    for i, (name, t) in enumerate(marks):
        if name == "INACTIVE":
            break
        t_next = marks[i + 1][1] if i + 1 < len(marks) else end
        x = 1000 * (t - marks[0][1]) / span
        w = max(1000 * (t_next - t) / span, 1.0)
        out.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="22" '
                   f'class="s-{name.lower()}"><title>{name}: {fmt_seconds(t_next - t)}</title>'
                   "</rect>"
                   f'<text x="{x + 3:.1f}" y="15">{name if w > 60 else ""}</text>')
    return (f'<svg class="life" viewBox="0 0 1000 22" preserveAspectRatio="none" '
            f'role="img" aria-label="job states over time">{"".join(out)}</svg>')


def job(frame: Frame, doc: Mapping[str, Any], can_cancel: bool) -> str:
    """A job: its facts, pending reason and estimate, its eventlog as a timeline, R, and
    (for its owner) jobspec and output."""
    title = f"Job {doc['f58']}"
    if not doc["exists"]:
        return page(frame, title, f'<p class="note" id="job-note">{esc(doc.get("note"))}</p>'
                    + _events(doc["events"]))
    row = doc["job"]
    status = row.get("result") or row.get("state")
    facts = [("id", f"{doc['f58']} ({doc['id']})"), ("status", status),
             ("owner", f"{doc['owner_name']} ({doc['owner']})"),
             ("queue", row.get("queue") or "(default)"), ("name", row.get("name")),
             ("tasks / nodes", f"{row.get('ntasks')} / {row.get('nnodes') or '-'}"),
             ("priority / urgency", f"{row.get('priority')} / {row.get('urgency')}"),
             ("submitted", fmt_time(row.get("t_submit"))), ("ran", fmt_time(row.get("t_run"))),
             ("runtime", row.get("runtime_text")), ("nodes", row.get("nodelist")),
             ("info", row.get("contextual_info"))]
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts
                   if v not in (None, ""))
    parts = [f'<table class="facts" id="facts">{rows}</table>']
    pending = doc.get("pending")
    if pending:
        eta = pending.get("t_estimate")
        when = f"; expected to start {fmt_time(float(eta))}" if isinstance(eta, int | float) \
            else ""
        parts.append(f'<p class="pending" id="pending">pending: '
                     f'{esc(pending.get("reason") or pending.get("info") or "waiting")}'
                     f"{esc(when)}</p>")
        if pending.get("forecast"):
            parts.append(_forecast(frame, pending["forecast"]))
    if can_cancel:
        parts.append(f'<form method="post" action="/actions/cancel" id="cancel-form">'
                     f'{frame.csrf_field()}<input type="hidden" name="jobid" '
                     f'value="{esc(doc["f58"])}"><button type="submit" id="cancel-button">'
                     "cancel this job</button></form>")
    parts.append("<h2>Timeline</h2>" + _life_bar(row, frame.at or time.time())
                 + _events(doc["events"]))
    parts.append('<h2>Resources (R)</h2>' + (_pre(doc["R"]) if doc.get("R") is not None
                                             else '<p class="note">none allocated</p>'))
    spec = doc["jobspec"]
    parts.append('<h2>Jobspec</h2><div id="jobspec">' + (
        f'<p class="private">private: {esc(spec["why"])}</p>' if spec.get("private")
        else _pre(spec.get("jobspec"))) + "</div>")
    output = doc["output"]
    if output.get("private"):
        out_html = f'<p class="private">private: {esc(output["why"])}</p>'
    else:
        text = "".join(line["data"] for line in output["lines"])
        out_html = (('<p class="note">older output not shown</p>' if output["truncated"]
                     else "") + f"<pre>{esc(text)}</pre>")
    parts.append(f'<h2>Output (tail)</h2><div id="output">{out_html}</div>')
    return page(frame, title, "".join(parts), live=True)


def _forecast(frame: Frame, fc: Mapping[str, Any]) -> str:
    """A pending job's forecast (docs/forecast.md): expected start, nodes, what it waits
    behind."""
    start = fc.get("t_forecast")
    if not isinstance(start, int | float):
        text = "expected start: none (it cannot start as the instance is now)"
        return f'<p class="forecast" id="forecast">{esc(text)}</p>'
    items = [f"expected start: {esc(fmt_time(float(start)))}"]
    if fc.get("nodelist") or fc.get("ranks"):
        items.append(f"on {esc(fc.get('nodelist') or 'ranks ' + str(fc.get('ranks')))}")
    behind = [f'<a href="{frame.link("/jobs/" + j)}">{esc(j)}</a>'
              for j in fc.get("behind") or ()]
    if behind:
        more = fc.get("behind_more") or 0
        items.append("after " + ", ".join(behind) + (f" and {more} more" if more else ""))
    items.append(f'<span class="note">(forecast, run times from the {esc(fc.get("runtime"))}; '
                 f'<a href="{frame.link("/gantt")}?forecast=1">Gantt</a>)</span>')
    return f'<p class="forecast" id="forecast">{"; ".join(items)}</p>'


def _events(events: Sequence[Mapping[str, Any]]) -> str:
    if not events:
        return '<p class="note">no events</p>'
    first = events[0]["timestamp"]
    items = []
    for e in events:
        ctx = " ".join(f"{k}={json.dumps(v)}" for k, v in (e["context"] or {}).items())
        items.append(f'<li class="ev{" future" if e["future"] else ""}" '
                     f'data-name="{esc(e["name"])}"><span class="t">{esc(fmt_time(e["timestamp"]))}'
                     f' +{e["timestamp"] - first:.3f}s</span> <b>{esc(e["name"])}</b> '
                     f'<span class="ctx">{esc(ctx)}</span></li>')
    return f'<ol class="events" id="events">{"".join(items)}</ol>'


# ---------------------------------------------------------------- Gantt


def _colour(key: str) -> str:
    return f"hsl({zlib.crc32(key.encode()) % 360}, 55%, 55%)"


def gantt(frame: Frame, doc: Mapping[str, Any]) -> str:
    """Allocations over a window: one row per node, one bar per job on each of its nodes."""
    start, end = float(doc["start"]), float(doc["end"])
    ranks = doc["ranks"]
    row_of = {r["rank"]: i for i, r in enumerate(ranks)}
    height = 22
    label_w = 90
    width = 1000
    span = max(end - start, 1e-6)
    svg = []
    for i, r in enumerate(ranks):
        y = i * height + 20
        svg.append(f'<text x="0" y="{y + 15}" class="lbl">{esc(r["host"])}</text>'
                   f'<line x1="{label_w}" x2="{label_w + width}" y1="{y + height}" '
                   f'y2="{y + height}" class="grid"/>')
    for k in range(6):
        t = start + span * k / 5
        x = label_w + width * k / 5
        tick = time.strftime("%H:%M:%S", time.localtime(t))
        if span < 60:  # a short window: its ticks would all read the same second
            tick += f".{int((t % 1) * 10)}"
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        svg.append(f'<text x="{x:.0f}" y="12" class="tick" text-anchor="{anchor}">'
                   f"{esc(tick)}</text>"
                   f'<line x1="{x:.0f}" x2="{x:.0f}" y1="16" y2="{len(ranks) * height + 20}" '
                   'class="grid"/>')
    for bar in doc["bars"]:
        x = label_w + width * (bar["start"] - start) / span
        w = max(width * (bar["end"] - bar["start"]) / span, 1.5)
        tip = (f"{bar['f58']} {bar['name']} ({bar['user']}) {bar['state']}: "
               f"{fmt_time(bar['t_run'])} to {fmt_time(bar['t_end']) or 'still running'}")
        cls = "bar"
        if bar.get("forecast"):
            # the forecast future: lighter, and said so in the tip
            cls = "bar forecast"
            tip = (f"{bar['f58']} {bar['name']} ({bar['user']}) forecast: "
                   f"{fmt_time(bar['start'])} to {fmt_time(bar['t_end']) or 'no end'}")
        for rank in bar["ranks"]:
            row = row_of.get(rank)
            if row is None:
                continue
            y = row * height + 22
            svg.append(f'<a href="{frame.link("/jobs/" + bar["f58"])}"><rect x="{x:.1f}" '
                       f'y="{y}" width="{w:.1f}" height="{height - 4}" '
                       f'fill="{_colour(bar["user"])}" class="{cls}"><title>{esc(tip)}</title>'
                       "</rect></a>")
    if doc.get("now") is not None and start < float(doc["now"]) < end:
        x = label_w + width * (float(doc["now"]) - start) / span
        svg.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="16" y2="{len(ranks) * height + 20}" '
                   'class="now" id="gantt-now"/>')
    total_h = len(ranks) * height + 30
    chart = (f'<svg class="gantt" id="gantt" viewBox="0 0 {label_w + width + 10} {total_h}" '
             f'role="img" aria-label="allocations over time">{"".join(svg)}</svg>')
    at_field = f'<input type="hidden" name="at" value="{esc(repr(frame.at))}">' \
        if frame.at is not None else ""
    form = (f'<form method="get" action="/gantt" class="filters">{at_field}'
            f'<label>from <input name="start" size="20" value="{esc(fmt_time(start))}"></label> '
            f'<label>to <input name="end" size="20" value="{esc(fmt_time(end))}"></label> '
            '<label><input type="checkbox" name="forecast" value="1" id="gantt-forecast"'
            f'{" checked" if doc.get("now") is not None else ""}> forecast</label> '
            '<button type="submit">show</button></form>')
    note = f'<p class="summary">{len(doc["bars"])} allocations from {esc(fmt_time(start))} ' \
           f'to {esc(fmt_time(end))}{" (the latest ones only)" if doc["truncated"] else ""}.</p>'
    return page(frame, "Gantt", form + note + chart)


# ---------------------------------------------------------------- usage


def usage(frame: Frame, doc: Mapping[str, Any]) -> str:
    """Usage per user and bank over a period."""
    rows = [[esc(r["user"]), esc(r["bank"] or "-"), str(r["jobs"]),
             f"{r['core_seconds']:.1f}", f"{r['gpu_seconds']:.1f}", f"{r['node_seconds']:.1f}"]
            for r in doc["usage"]]
    banks = [[esc(b["bank"]), str(b["jobs"]), f"{b['core_seconds']:.1f}",
              f"{b['gpu_seconds']:.1f}", f"{b['node_seconds']:.1f}"] for b in doc["banks"]]
    at_field = f'<input type="hidden" name="at" value="{esc(repr(frame.at))}">' \
        if frame.at is not None else ""
    since = doc["since"]
    form = (f'<form method="get" action="/usage" class="filters">{at_field}'
            f'<label>since <input name="since" size="20" placeholder="-7d" '
            f'value="{esc(fmt_time(since) if since else "")}"></label> '
            '<button type="submit">show</button></form>')
    body = form + f'<p class="summary">from {esc(fmt_time(since) if since else "the start")} ' \
        f'to {esc(fmt_time(doc["until"]))}</p>' + _table(
            ["user", "bank", "jobs", "core-seconds", "GPU-seconds", "node-seconds"], rows,
            tid="usage")
    if banks:
        body += "<h2>Banks</h2>" + _table(
            ["bank", "jobs", "core-seconds", "GPU-seconds", "node-seconds"], banks)
    return page(frame, "Usage", body)


# ---------------------------------------------------------------- login, errors


def login(frame: Frame, next_path: str, error: str | None = None) -> str:
    """The login form: a fluxes user name and its password (from the credentials file)."""
    message = f'<p class="flash error" id="login-error">{esc(error)}</p>' if error else ""
    body = (f"{message}<form method=\"post\" action=\"/login\" id=\"login-form\">"
            f'{frame.csrf_field()}<input type="hidden" name="next" value="{esc(next_path)}">'
            '<p><label>user <input name="user" id="user" autocomplete="username" required>'
            '</label></p><p><label>password <input name="password" id="password" '
            'type="password" autocomplete="current-password" required></label></p>'
            '<p><button type="submit" id="login-button">log in</button></p></form>'
            '<p class="note">Your fluxes credentials: the user name and the password of '
            "your credentials file (the password in its <code>uri</code>). The instance owner "
            "logs in with their user name and the owner's password.</p>")
    return page(frame, "Log in", body)


def error(frame: Frame, status: int, message: str) -> str:
    """An error page."""
    return page(frame, f"Error {status}", f'<p class="flash error" id="error">{esc(message)}</p>')
