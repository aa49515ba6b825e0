"""``fluxes jobs``' view of the instance tree: ``-R``/``--recurse-all`` (the jobs of each
batch or alloc job's child instance, under it) and the fields read from a child
(``{instance}``, ``{instance_stats}``, flux's ``instance.*``, ``{uri}``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluxes.store.instance import Instance


def thread_count(text: str) -> int:
    """argparse type of ``--threads``: a number of threads, 1-256."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid thread count {text!r}") from None
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"threads must be 1-256, got {value}")
    return value


def print_children(inst: Instance, jobid: int, fmt: Any, args: argparse.Namespace,
                   depth: int) -> None:
    """``fluxes jobs -R``: the jobs of job ``jobid``'s child instance (every user's,
    with the listing's state filter), indented under it, and theirs below them."""
    records, child = _child_jobs(inst, jobid, args, depth)
    if child is None:
        return
    _header, lines = fmt.render(vars(row) for row in _rows(records))
    for rec, line in zip(records, lines, strict=True):
        print("  " * depth + line)
        if descends(args, rec):
            print_children(child, rec.id, fmt, args, depth + 1)


def nest_children(inst: Instance, jobid: int, entry: dict[str, Any],
                  args: argparse.Namespace, depth: int) -> None:
    """``fluxes jobs -R --json``: the jobs of job ``jobid``'s child instance as the
    ``jobs`` list of its JSON ``entry`` (as flux's), theirs in turn in theirs."""
    records, child = _child_jobs(inst, jobid, args, depth)
    if child is None:
        return
    entry["jobs"] = [row.as_dict() for row in _rows(records)]
    for rec, sub in zip(records, entry["jobs"], strict=True):
        if descends(args, rec):
            nest_children(child, rec.id, sub, args, depth + 1)


def descends(args: argparse.Namespace, rec: Any) -> bool:
    """Whether ``fluxes jobs -R`` goes into job ``rec``'s child instance: the user's own
    jobs, or every one with ``--recurse-all`` (flux's: others' instances are normally
    closed to the user)."""
    return bool(getattr(args, "recurse_all", False)) or \
        rec.job.userid == getattr(args, "owner_uid", rec.job.userid)


def _child_jobs(inst: Instance, jobid: int, args: argparse.Namespace, depth: int
                ) -> tuple[list[Any], Instance | None]:
    """The records ``-R`` lists under job ``jobid`` and its child instance (None when
    it has none, or ``-L`` stops above this depth)."""
    from fluxes.cli.cmd_batch import child_instance
    from fluxes.service.jobs import select_jobs

    level = getattr(args, "level", None)
    if level and depth > level:
        return [], None
    child = child_instance(inst, jobid)
    if child is None:
        return [], None
    states = args.filter or ("active,inactive" if args.a else "active")
    return select_jobs(child, states=states, everyone=True), child


def _rows(records: list[Any]) -> list[Any]:
    from fluxes.service.jobrows import iter_rows

    return iter_rows(records)


def mark_instances(inst: Instance, rows: list[Any], threads: int = 1) -> None:
    """Fill the ``instance`` (the child's namespace), ``instance_stats`` (its job
    counts), ``instance.*`` (flux's: its job counts and resources) and ``uri`` (its
    URI, without a password) fields of the ``fluxes jobs`` rows of batch and alloc
    jobs."""
    from fluxes.cli.cmd_batch import instance_summary
    from fluxes.service.jobfields import instance_fields
    from fluxes.store.instance import InstanceURI
    from fluxes.store.joblist import JobListStore
    from fluxes.store.nesting import ChildTable, instance_of
    from fluxes.store.resources import published_summary
    from fluxes.store.security import strip_password

    redis_url = strip_password(inst.uri.redis_url)

    def mark(row: Any, ns: str) -> None:
        row.instance = ns
        child = instance_of(inst, ns)
        row.instance_stats = instance_summary(child)
        row.instance_info = instance_fields(JobListStore(child.redis, child.keys).counters(),
                                            published_summary(child.redis, child.keys))
        row.uri = str(InstanceURI(redis_url, ns))

    found: list[tuple[Any, str]] = []
    for start in range(0, len(rows), 1000):
        chunk = rows[start:start + 1000]
        names = ChildTable(inst.redis, inst.keys).namespaces_of([int(r.id) for r in chunk])
        found += [(row, ns) for row, ns in zip(chunk, names, strict=True) if ns is not None]
    if threads > 1 and len(found) > 1 and hasattr(inst.redis, "connection_pool"):
        # each child is a few round trips: --threads overlaps them (redis-py's client
        # takes a connection from its pool per command, so threads may share it; a
        # one-socket client may not: it reads them one after the other)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(lambda pair: mark(*pair), found))
        return
    for row, ns in found:
        mark(row, ns)
