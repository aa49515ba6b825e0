"""``fluxes status``: one look at an instance: workers, leases, lag, queues, resources, jobs.

Everything comes from what the instance already stores: the worker registry
(heartbeats every two seconds), the lease keys, ``XINFO GROUPS`` of every
consumed stream, the queue event stream, the scheduler's published resource
summary, the job-list counters and the dead-letter stream. The exit code is
non-zero when no job manager (for some partition) or no scheduler is alive,
or when a worker is crash-looping (restarted CRASH_LOOP_RESTARTS times in the
last minute), so the command doubles as a health check; the summary is
printed either way. Dead letters are counted per refused stream too.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.cli.util import PROG, help_with_example, instance, print_json
from fluxes.store.security import strip_password

if TYPE_CHECKING:
    from fluxes.store.instance import Instance

#: Heartbeats come every 2 s; a worker silent five times as long is taken for gone
#: (a long step, such as a big restore, may delay a beat or two).
STALE_AFTER_S = 10.0
#: Beyond this many exec workers the human output summarises them on one line.
EXEC_LIST_MAX = 16
#: Lost jobs named by id in the status (``fluxes admin lost-jobs`` lists every one).
LOST_LISTED = 20
#: Restarts in the last RESTART_WINDOW_S after which a worker counts as crash-looping.
CRASH_LOOP_RESTARTS = 3
#: The window restarts are counted in (workers keep their starts of the last minute).
RESTART_WINDOW_S = 60.0
#: Facts of a registry record shown in their own columns (the rest go to NOTES).
_COLUMNS = frozenset({"kind", "pid", "host", "started", "heartbeat", "leader",
                      "metrics_port", "name", "starts", "restarts", "crash_loop"})


def register(subparsers: Any) -> None:
    """Add ``status``."""
    parser = subparsers.add_parser("status", **help_with_example(
        "Summarise the instance: workers alive, leases, stream lag, queues, resources,\n"
        "job counts and dead letters. Exits 1 (after printing) when no job manager or\n"
        "no scheduler is alive.",
        ["fluxes status", "fluxes status --json | jq .streams"]))
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.set_defaults(func=_status)


# ----------------------------------------------------------------------------- gathering


def _workers(inst: Instance, now: float) -> list[dict[str, Any]]:
    from fluxes.proc.metrics import heartbeat_age
    from fluxes.store.status import worker_records

    out = []
    for name, raw in worker_records(inst.redis, inst.keys).items():
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        age = heartbeat_age(record, now)
        role = None
        if "leader" in record:
            role = "leader" if record["leader"] else "standby"
        out.append({**record, "name": name,
                    "kind": str(record.get("kind", "?")),
                    "age_s": None if age is None else round(age, 1),
                    "alive": age is not None and age <= STALE_AFTER_S, "role": role})
    count_restarts(out, now)
    out.sort(key=lambda w: (w["kind"], w.get("partition", 0), str(w.get("ranks", "")),
                            w["name"]))
    return out


def _starts(worker: dict[str, Any], now: float) -> list[float]:
    """A worker record's start times within RESTART_WINDOW_S (its own ``started`` too)."""
    times = worker.get("starts")
    found = [*(times if isinstance(times, list) else []), worker.get("started")]
    return sorted({float(t) for t in found if isinstance(t, int | float)
                   and not isinstance(t, bool) and 0 <= now - float(t) < RESTART_WINDOW_S})


def count_restarts(workers: list[dict[str, Any]], now: float) -> None:
    """Set ``restarts`` (in the last minute) and ``crash_loop`` on every live worker.

    A worker restarted under its name (``fluxes start``, systemd units with
    ``--name``) keeps its recent start times in its record; one restarted
    under a new name (the default name holds the pid) leaves the dead one's
    record behind, stale: those of the same kind, host and partition or
    ranks that started within the window count too.
    """
    def slot(w: dict[str, Any]) -> tuple[str, str, str, str]:
        return (w["kind"], str(w.get("host", "")), str(w.get("partition", "")),
                str(w.get("ranks", "")))

    stale_starts: dict[tuple[str, str, str, str], int] = {}
    for worker in workers:
        if not worker["alive"]:
            stale_starts[slot(worker)] = stale_starts.get(slot(worker), 0) + len(
                _starts(worker, now))
    for worker in workers:
        if not worker["alive"]:
            continue
        restarts = max(0, len(_starts(worker, now)) - 1) + stale_starts.get(slot(worker), 0)
        worker["restarts"] = restarts
        worker["crash_loop"] = restarts >= CRASH_LOOP_RESTARTS


def _leases(inst: Instance) -> list[dict[str, Any]]:
    keys = inst.keys
    wanted = []
    for p in range(keys.partitions):
        wanted.append(("job-manager", p, keys.jm_lease(p), keys.jm_fence(p)))
        wanted.append(("scheduler", p, keys.sched_lease(p), keys.sched_fence(p)))
        wanted.append(("job-list", p, keys.joblist_lease(p), keys.joblist_fence(p)))
        wanted.append(("accounting", p, keys.acct_lease(p), keys.acct_fence(p)))
    from fluxes.store.status import lease_states

    replies = lease_states(inst.redis, keys, [(lease, fence) for _k, _p, lease, fence in wanted])
    out = []
    for (kind, p, _lease, _fence), (holder, ttl, epoch) in zip(wanted, replies, strict=True):
        out.append({"lease": kind, "partition": p,
                    "holder": holder.decode("utf-8", "replace") if holder else None,
                    "ttl_ms": int(ttl) if holder and int(ttl) >= 0 else None,
                    "epoch": int(epoch) if epoch else None})
    return out


def _exec_ranks(inst: Instance) -> list[int]:
    """Ranks with an exec request stream: the inventory's, and any registered worker's."""
    from fluxes.errors import FluxesError
    from fluxes.store.resources import load_inventory

    ranks: set[int] = set()
    try:
        ranks.update(t.rank for t in load_inventory(inst))
    except (FluxesError, ValueError, OSError):
        pass  # no inventory recorded: the registry still names the ranks served
    from fluxes.store.status import registered_exec_ranks

    ranks.update(registered_exec_ranks(inst.redis, inst.keys))
    return sorted(ranks)


def _streams(inst: Instance) -> list[dict[str, Any]]:
    from fluxes.store.groups import stream_lags

    keys = inst.keys
    owner, _uid = inst.owner()
    from fluxes.store.users import UserTable

    users = sorted({owner, *UserTable(inst.redis, keys).entries()})
    streams = [keys.submit(u) for u in users]
    for p in range(keys.partitions):
        streams += [keys.jm_new(p), keys.jm_ctl(p), keys.sched_resp(p), keys.exec_events(p),
                    keys.journal(p)]
    streams += [keys.exec_rank(r) for r in _exec_ranks(inst)]
    return [{"stream": g.stream, "group": g.group, "consumers": g.consumers,
             "pending": g.pending, "undelivered": g.undelivered, "lag": g.lag}
            for g in stream_lags(inst.redis, streams)]


def _queues(inst: Instance) -> list[dict[str, Any]]:
    from fluxes.service.queues import queue_states

    return [{"queue": name, "enabled": state.enabled, "disable_reason": state.enable_reason,
             "started": state.started, "stop_reason": state.stop_reason}
            for name, state in queue_states(inst).items()]


def _resources(inst: Instance, now: float) -> dict[str, Any] | None:
    from fluxes.store.resources import published_summary

    summary = published_summary(inst.redis, inst.keys)
    if summary is None:
        return None
    published = summary.get("time")
    if isinstance(published, int | float):
        summary["age_s"] = round(max(0.0, now - published), 1)
    return summary


def _jobs(inst: Instance) -> dict[str, Any]:
    from fluxes.cli.cmd_jobs import stats_line
    from fluxes.proc.metrics import job_counts
    from fluxes.service.jobs import caught_up

    # a status must come back even when the job-list worker is down: wait briefly
    store = caught_up(inst, timeout=1.0)
    states, results = job_counts(store.counters())
    return {"summary": stats_line(inst, store), "states": states, "results": results}


def _dead_letters(inst: Instance) -> dict[str, Any]:
    from fluxes.store.deadletters import read_counts
    from fluxes.store.status import dead_letter_tail

    count, last = dead_letter_tail(inst.redis, inst.keys)
    latest = None
    if last:
        fields = {k.decode(): v.decode("utf-8", "replace") for k, v in last.items()}
        latest = {k: fields.get(k) for k in ("time", "worker", "stream", "error")}
    # the stream keeps the newest 10,000; the counts cover every one ever written
    return {"count": int(count), "last": latest, "by_stream": read_counts(inst.redis, inst.keys)}


def problems(status: dict[str, Any]) -> list[str]:
    """What makes the instance unable to run jobs: a partition without a live job
    manager, or no live scheduler; and acknowledged writes Redis lost."""
    alive = [w for w in status["workers"] if w["alive"]]
    out = []
    for p in range(status["instance"]["partitions"]):
        if not any(w["kind"] == "job-manager" and w.get("partition", 0) == p for w in alive):
            out.append(f"no job manager alive for partition {p}")
    if not any(w["kind"] == "scheduler" for w in alive):
        out.append("no scheduler alive")
    out += [f"worker {w['name']} is crash-looping ({w['restarts']} restarts in the last "
            f"{RESTART_WINDOW_S:.0f} s)" for w in alive if w.get("crash_loop")]
    # a job-list worker found stored history older than it had seen (a power cut)
    out += [f"{w['name']}: writes lost: {w['lost_writes']}" for w in alive
            if w.get("lost_writes")]
    lost = status.get("lost_jobs") or {}
    if lost.get("count"):
        more = lost["count"] - len(lost["ids"])
        out.append(f"{lost['count']} acknowledged jobs lost by Redis (a crash inside its "
                   f"fsync window): {' '.join(lost['ids'])}" + (f" and {more} more" if more
                                                                  else "")
                   + "; 'fluxes admin lost-jobs' lists them, '--clear' forgets them")
    return out


def _lost_jobs(inst: Instance) -> dict[str, Any]:
    """The acknowledged jobs Redis lost (fluxes.store.acklog): their count and the first
    LOST_LISTED ids."""
    from fluxes.formats.jobid import encode
    from fluxes.store.acklog import lost_jobs

    lost = lost_jobs(inst.redis, inst.keys)
    return {"count": len(lost), "ids": [encode(j, "f58") for j in list(lost)[:LOST_LISTED]]}


def collect(inst: Instance) -> dict[str, Any]:
    """The whole status as one JSON-ready object."""
    now = time.time()
    from fluxes.store.status import instance_facts

    facts = instance_facts(inst.redis, inst.keys, ("owner", "started", "created"))
    status: dict[str, Any] = {
        "instance": {"uri": strip_password(str(inst.uri)), "namespace": inst.keys.ns,
                     "partitions": inst.keys.partitions, **facts, "time": now},
        "workers": _workers(inst, now),
        "leases": _leases(inst),
        "streams": _streams(inst),
        "queues": _queues(inst),
        "resources": _resources(inst, now),
        "jobs": _jobs(inst),
        "dead_letters": _dead_letters(inst),
        "lost_jobs": _lost_jobs(inst),
    }
    status["problems"] = problems(status)
    return status


# ----------------------------------------------------------------------------- printing


def _opt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _worker_notes(worker: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in worker.items()
                    if k not in _COLUMNS and k not in ("age_s", "alive", "role", "read_positions"))


def render(status: dict[str, Any]) -> list[str]:
    """The human form: a few aligned sections."""
    from fluxes.cli.display import table

    inst = status["instance"]
    lines = [f"instance {inst['uri']}  partitions {inst['partitions']}  "
             f"owner {inst.get('owner', '-')}", ""]

    workers = status["workers"]
    execs = [w for w in workers if w["kind"] == "exec"]
    listed = [w for w in workers if w["kind"] != "exec" or len(execs) <= EXEC_LIST_MAX
              or not w["alive"]]
    rows = [[w["kind"], w["name"], str(w.get("host", "-")), str(w.get("pid", "-")),
             _opt(w["age_s"], "s"), _state(w), w["role"] or "-",
             _opt(w.get("metrics_port")), _worker_notes(w)] for w in listed]
    lines.append("WORKERS")
    lines += table(["KIND", "NAME", "HOST", "PID", "BEAT", "STATE", "ROLE", "METRICS",
                    "NOTES"], rows, right=frozenset({3, 4}))
    if len(execs) > EXEC_LIST_MAX:
        alive = sum(1 for w in execs if w["alive"])
        lines.append(f"(and {alive} live exec workers not listed; --json lists every worker)")
    lines.append("")

    lines.append("LEASES")
    lines += table(["LEASE", "PARTITION", "HOLDER", "TTL", "EPOCH"],
                   [[lease["lease"], str(lease["partition"]), lease["holder"] or "(free)",
                     "-" if lease["ttl_ms"] is None else f"{lease['ttl_ms'] / 1000:.1f}s",
                     _opt(lease["epoch"])] for lease in status["leases"]],
                   right=frozenset({1, 3, 4}))
    lines.append("")

    lines.append("STREAMS")
    lines += table(["STREAM", "GROUP", "CONSUMERS", "PENDING", "UNDELIVERED", "LAG"],
                   _stream_rows(status["streams"]), right=frozenset({2, 3, 4, 5}))
    lines.append("")

    lines.append("QUEUES")
    lines += table(["QUEUE", "SUBMISSION", "SCHEDULING"],
                   [[q["queue"] or "(default)",
                     "enabled" if q["enabled"] else f"disabled: {q['disable_reason'] or '-'}",
                     "started" if q["started"] else f"stopped: {q['stop_reason'] or '-'}"]
                    for q in status["queues"]])
    lines.append("")

    res = status["resources"]
    if res is None:
        lines.append("RESOURCES (no summary published yet: is the scheduler running?)")
    else:
        lines.append(f"RESOURCES (published {_opt(res.get('age_s'), 's')} ago by "
                     f"{res.get('scheduler', '-')}, {res.get('pending', 0)} pending)")
        lines += table(["STATE", "NNODES", "NCORES", "NGPUS", "NODELIST"],
                       [[state, str(res[state]["nnodes"]), str(res[state]["ncores"]),
                         str(res[state]["ngpus"]), res[state]["nodelist"]]
                        for state in ("free", "allocated", "down") if state in res],
                       right=frozenset({1, 2, 3}))
    lines.append("")

    lines.append(f"JOBS  {status['jobs']['summary']}")
    dead = status["dead_letters"]
    line = f"DEAD LETTERS  {dead['count']}"
    if dead["last"]:
        last = dead["last"]
        line += f"  (last from {last['worker']} on {last['stream']}: {last['error']})"
    lines.append(line)
    lost = status.get("lost_jobs") or {}
    if lost.get("count"):
        lines.append(f"LOST JOBS  {lost['count']}  {' '.join(lost['ids'])}"
                     + (" ..." if lost["count"] > len(lost["ids"]) else ""))
    by_stream = dead.get("by_stream") or {}
    if by_stream:
        lines += table(["STREAM", "REFUSED"],
                       [[stream, str(n)] for stream, n in sorted(by_stream.items())],
                       right=frozenset({1}))
    return lines


def _state(worker: dict[str, Any]) -> str:
    """The STATE column: ok, STALE, or CRASH-LOOP (with its restarts of the last minute)."""
    if not worker["alive"]:
        return "STALE"
    if worker.get("crash_loop"):
        return f"CRASH-LOOP({worker['restarts']}/1m)"
    return "ok"


def _stream_rows(streams: list[dict[str, Any]]) -> list[list[str]]:
    """One row per stream and group; exec request streams summed into one row per group."""
    rows = []
    summed: dict[str, list[int | None]] = {}
    for s in streams:
        if ":exec:rank:" in s["stream"]:
            total = summed.setdefault(s["group"], [0, 0, 0, 0, 0])
            total[0] = (total[0] or 0) + 1
            for i, field in enumerate(("consumers", "pending", "undelivered", "lag"), 1):
                before, value = total[i], s[field]
                total[i] = None if before is None or value is None else before + value
            continue
        rows.append([s["stream"], s["group"], str(s["consumers"]), str(s["pending"]),
                     _opt(s["undelivered"]), _opt(s["lag"])])
    for group, (n, consumers, pending, undelivered, lag) in sorted(summed.items()):
        rows.append([f"exec:rank:* ({n} streams)", group, _opt(consumers), _opt(pending),
                     _opt(undelivered), _opt(lag)])
    return rows


def _status(args: argparse.Namespace) -> int:
    status = collect(instance(args))
    if args.json:
        print_json(status)
    else:
        print("\n".join(render(status)))
    for problem in status["problems"]:
        print(f"{PROG} status: {problem}", file=sys.stderr)
    return 1 if status["problems"] else 0
