"""How a job's share runs on one execution rank: tasks, cores, environment, output, status.

Everything here is pure (no Redis, no processes) so the exec worker's rules
can be tested on their own:

* :func:`compute_layout` places the job's tasks on the ranks of its R.  The
  number of tasks is ``total``, or ``per_slot`` times the jobspec's slot
  count, or ``per_resource`` times the allocated cores/GPUs/nodes.  The slots
  of a rank are its allocated cores grouped by the jobspec's slot size, and
  tasks are dealt out one at a time, largest rank first and round robin
  (oversubscribing once every slot holds a task), the way flux's job shell
  spreads them.  Task ranks are then numbered in rank order.
* :func:`task_environment` builds a task's environment: a minimal base from
  the worker, the job's ``attributes.system.environment`` (a null value
  unsets), then the ``FLUXES_*`` facts and ``CUDA_VISIBLE_DEVICES``.
* :func:`output_spec` and :func:`expand_template` turn the shell's output
  options into file paths (``{{id}}``, ``{{jobid}}``, ``{{id.FORM}}``,
  ``{{name}}``, ``{{taskid}}``, ``{{rank}}``).
* :func:`run_duration` reads the simulated-execution option, and
  :func:`wait_status` turns a shell exit code back into a POSIX wait status.

Bad input raises :class:`ValueError` with a one-line message; the worker
reports it as the job's exec error.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fluxes.domain.exec.taskorder import task_order
from fluxes.formats import fsd, shellopts
from fluxes.formats import jobid as _jobid
from fluxes.formats.counts import Count
from fluxes.formats.rset import ResourceSet

__all__ = [
    "BASE_VARIABLES",
    "JobLayout",
    "OutputSpec",
    "RankResources",
    "RankShare",
    "Task",
    "base_environment",
    "command_error",
    "compute_layout",
    "distribute",
    "environment_overlay",
    "expand_template",
    "job_cwd",
    "job_environment",
    "job_name",
    "output_spec",
    "rank_resources",
    "run_duration",
    "shell_option",
    "slot_shape",
    "task_command",
    "task_environment",
    "wait_status",
]

#: Variables a task inherits from the exec worker; everything else comes from the job.
BASE_VARIABLES: Final = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TMPDIR")

#: PATH for tasks when neither the worker nor the job gives one.
DEFAULT_PATH: Final = "/usr/local/bin:/usr/bin:/bin"

#: Largest signal number a shell reports as 128 + N.
_MAX_SIGNAL: Final = int(getattr(signal, "NSIG", 65)) - 1

_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


# ----------------------------------------------------------------------------- jobspec parts


def _system(jobspec: Mapping[str, Any]) -> Mapping[str, Any]:
    """attributes.system of a jobspec document, or an empty mapping."""
    system = _dig(jobspec, "attributes", "system")
    return system if type(system) is dict or isinstance(system, Mapping) else {}


def _dig(node: Any, *path: str) -> Any:
    """node[p0][p1]... or None when some step is missing or not a mapping."""
    for key in path:
        # a decoded jobspec's objects are dicts: the ABC check (~10x slower) for others
        if type(node) is not dict and not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def run_duration(jobspec: Mapping[str, Any]) -> float | None:
    """Seconds of ``attributes.system.exec.test.run_duration``, None when not simulated.

    The value is an RFC 23 duration string or a number of seconds (as in
    flux's test execution mode).  ValueError when it is not a valid duration.
    """
    value = _dig(_system(jobspec), "exec", "test", "run_duration")
    if value is None:
        return None
    try:
        return fsd.parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"attributes.system.exec.test.run_duration: {exc}") from None


def _task(jobspec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The jobspec's only task entry (fluxes, like flux's shell, runs one task group)."""
    tasks = jobspec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ValueError("jobspec has no tasks")
    if len(tasks) > 1:
        raise ValueError(f"jobspec has {len(tasks)} task entries; only one is supported")
    task = tasks[0]
    if not isinstance(task, Mapping):
        raise ValueError("tasks[0] is not a mapping")
    return task


def task_command(jobspec: Mapping[str, Any]) -> list[str]:
    """The command every task runs (a copy)."""
    command = _task(jobspec).get("command")
    if not isinstance(command, list) or not command or \
            not all(isinstance(arg, str) for arg in command):
        raise ValueError("tasks[0].command must be a non-empty list of strings")
    return list(command)


def job_name(jobspec: Mapping[str, Any]) -> str:
    """attributes.system.job.name, else the basename of the command (as flux names jobs)."""
    name = _dig(_system(jobspec), "job", "name")
    if isinstance(name, str) and name:
        return name
    try:
        return os.path.basename(task_command(jobspec)[0]) or "job"
    except ValueError:
        return "job"


def shell_option(jobspec: Mapping[str, Any], name: str) -> Any:
    """``attributes.system.shell.options[name]``, or None."""
    return _dig(_system(jobspec), "shell", "options", name)


def job_cwd(jobspec: Mapping[str, Any]) -> str | None:
    """attributes.system.cwd when it is a string."""
    cwd = _system(jobspec).get("cwd")
    return cwd if isinstance(cwd, str) and cwd else None


def environment_overlay(jobspec: Mapping[str, Any]) -> Any:
    """attributes.system.environment as given (checked by :func:`job_environment`)."""
    return _system(jobspec).get("environment")


# ----------------------------------------------------------------------------- slots and tasks


def _count_min(value: Any, where: str) -> int:
    """The smallest amount a jobspec count accepts (what an allocation of it holds)."""
    try:
        return Count.decode(value).min
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


@dataclass(frozen=True, slots=True)
class SlotShape:
    """The task slot: how many the jobspec asks for, and what each holds."""

    label: str
    count: int
    cores: int
    gpus: int
    nodes: int


def slot_shape(jobspec: Mapping[str, Any]) -> SlotShape:
    """Find the slot the task names and count the cores, GPUs and nodes inside it."""
    label = _task(jobspec).get("slot")
    if not isinstance(label, str):
        raise ValueError("tasks[0].slot must be a string")

    def inside(vertices: Any, mult: int, totals: list[int]) -> None:
        for vertex in vertices if isinstance(vertices, list) else ():
            if not isinstance(vertex, Mapping):
                continue
            n = mult * _count_min(vertex.get("count", 1), f"slot {label!r}")
            kind = vertex.get("type")
            if kind == "core":
                totals[0] += n
            elif kind == "gpu":
                totals[1] += n
            elif kind == "node":
                totals[2] += n
            inside(vertex.get("with"), n, totals)

    def find(vertices: Any, mult: int) -> tuple[Mapping[str, Any], int] | None:
        for vertex in vertices if isinstance(vertices, list) else ():
            if not isinstance(vertex, Mapping):
                continue
            n = mult * _count_min(vertex.get("count", 1), f"slot {label!r}")
            if vertex.get("type") == "slot" and vertex.get("label") == label:
                return vertex, n
            found = find(vertex.get("with"), n)
            if found is not None:
                return found
        return None

    found = find(jobspec.get("resources"), 1)
    if found is None:
        raise ValueError(f"jobspec has no slot labelled {label!r}")
    slot, count = found
    totals = [0, 0, 0]
    inside(slot.get("with"), 1, totals)
    return SlotShape(label, count, totals[0], totals[1], totals[2])


@dataclass(frozen=True, slots=True)
class RankResources:
    """The cores and GPUs a job holds on one execution rank."""

    rank: int
    cores: tuple[int, ...]
    gpus: tuple[int, ...]


def rank_resources(R: ResourceSet) -> list[RankResources]:  # noqa: N803
    """Every rank of ``R`` with its cores and GPUs, in rank order."""
    return [RankResources(rank, tuple(R.cores(rank)), tuple(R.gpus(rank))) for rank in R.ranks]


def distribute(capacities: Sequence[int], ntasks: int) -> list[int]:
    """Deal ``ntasks`` tasks to ranks with ``capacities`` slots, as evenly as flux does.

    Ranks are visited largest first (ties in rank order), one task per visit,
    skipping ranks whose slots are all taken; once every slot holds a task the
    capacities are granted again (oversubscription).  Returns the number of
    tasks per rank, in the order of ``capacities``.
    """
    if ntasks < 0:
        raise ValueError(f"task count must be >= 0, got {ntasks}")
    counts = [0] * len(capacities)
    if not capacities or ntasks == 0:
        if ntasks:
            raise ValueError("no ranks to place tasks on")
        return counts
    caps = [max(0, c) for c in capacities]
    if not any(caps):
        caps = [1] * len(caps)
    order = sorted(range(len(caps)), key=lambda i: -caps[i])
    left = ntasks
    while left:
        room = list(caps)
        # One pass per "round" of the round robin: every rank with room
        # takes one task, so whole rounds are done in one step each.
        active = [i for i in order if room[i] > 0]
        while active and left:
            if left >= len(active):
                rounds = min(left // len(active), *(room[i] for i in active))
                for i in active:
                    counts[i] += rounds
                    room[i] -= rounds
                left -= rounds * len(active)
            else:
                for i in active[:left]:
                    counts[i] += 1
                left = 0
            active = [i for i in active if room[i] > 0]
    return counts


def _task_counts(jobspec: Mapping[str, Any], ranks: Sequence[RankResources]) -> list[int]:
    """Tasks per rank (in the order of ``ranks``) for the jobspec's task count."""
    shape = slot_shape(jobspec)
    count = shellopts.per_resource_count(jobspec) or _task(jobspec).get("count")
    if not isinstance(count, Mapping):
        raise ValueError("tasks[0].count must be a mapping")
    if "per_resource" in count:
        per = count["per_resource"]
        if not isinstance(per, Mapping):
            raise ValueError("tasks[0].count.per_resource must be a mapping")
        n = _count_min(per.get("count"), "tasks[0].count.per_resource.count")
        kind = per.get("type")
        if kind == "core":
            return [n * len(r.cores) for r in ranks]
        if kind == "gpu":
            return [n * len(r.gpus) for r in ranks]
        if kind == "node":
            return [n for _ in ranks]
        raise ValueError(f"tasks[0].count.per_resource.type {kind!r} is not supported "
                         "(use core, gpu or node)")
    capacities = _slots_per_rank(shape, ranks)
    if "per_slot" in count:
        # The jobspec's slot count decides how many tasks run (an exclusive
        # allocation holds more cores than slots); R decides where.
        n = _count_min(count["per_slot"], "tasks[0].count.per_slot")
        return distribute(capacities, n * shape.count)
    if "total" in count:
        return distribute(capacities, _count_min(count["total"], "tasks[0].count.total"))
    raise ValueError("tasks[0].count needs per_slot, per_resource or total")


def _slots_per_rank(shape: SlotShape, ranks: Sequence[RankResources]) -> list[int]:
    """How many of the job's slots each rank holds."""
    if shape.nodes:
        return [1 for _ in ranks]  # a slot of whole nodes: one per rank
    if shape.cores:
        have = [len(r.cores) for r in ranks]
        size = shape.cores
    elif shape.gpus:
        have = [len(r.gpus) for r in ranks]
        size = shape.gpus
    else:
        return [1 for _ in ranks]
    # A rank smaller than a slot (an odd R) still runs tasks: shrink the
    # slot to the smallest rank, as flux's shell does.
    smallest = min((h for h in have if h), default=0)
    if smallest and smallest < size:
        size = smallest
    return [h // size for h in have]


@dataclass(frozen=True, slots=True)
class Task:
    """One task: its rank in the job, its index on the node, its cores and GPUs."""

    rank: int
    local_id: int
    cores: tuple[int, ...]
    gpus: tuple[int, ...]


def _share_out(ids: tuple[int, ...], n: int, i: int) -> tuple[int, ...]:
    """The part of ``ids`` that local task ``i`` of ``n`` gets."""
    if not ids or n <= 0:
        return ()
    if len(ids) >= n:
        per = len(ids) // n
        return ids[i * per:(i + 1) * per]
    return (ids[i % len(ids)],)  # more tasks than ids: share them round robin


@dataclass(frozen=True, slots=True)
class RankShare:
    """The part of a job that runs on one execution rank."""

    rank: int
    node_rank: int
    first_task: int
    ntasks: int
    cores: tuple[int, ...]
    gpus: tuple[int, ...]
    order: tuple[int, ...] = ()  # its task ranks when not first_task.. (taskorder.py)

    @property
    def task_ranks(self) -> Sequence[int]:
        """The job task ranks on this rank."""
        return self.order or range(self.first_task, self.first_task + self.ntasks)

    def tasks(self) -> list[Task]:
        """This rank's tasks, each with its block of the rank's cores and GPUs."""
        n = self.ntasks
        return [Task(rank, i, _share_out(self.cores, n, i), _share_out(self.gpus, n, i))
                for i, rank in enumerate(self.task_ranks)]


@dataclass(frozen=True, slots=True)
class JobLayout:
    """Where every task of a job runs: total size, node count and per-rank shares."""

    size: int
    nnodes: int
    shares: tuple[RankShare, ...]

    def share(self, rank: int) -> RankShare:
        """The share of execution rank ``rank``; ValueError if the job does not use it."""
        for share in self.shares:
            if share.rank == rank:
                return share
        raise ValueError(f"rank {rank} is not in the job's R")

    def task_map(self) -> dict[int, Sequence[int]]:
        """Execution rank -> the task ranks it runs."""
        return {s.rank: s.task_ranks for s in self.shares}


def compute_layout(jobspec: Mapping[str, Any],
                   resources: ResourceSet | Iterable[RankResources]) -> JobLayout:
    """Place the jobspec's tasks on the ranks of ``resources`` (an R or its ranks)."""
    ranks = rank_resources(resources) if isinstance(resources, ResourceSet) \
        else sorted(resources, key=lambda r: r.rank)
    if not ranks:
        raise ValueError("R holds no ranks")
    counts = _task_counts(jobspec, ranks)
    order = task_order(shell_option(jobspec, "taskmap"), counts)
    shares = []
    first = 0
    for node_rank, (res, n) in enumerate(zip(ranks, counts, strict=True)):
        shares.append(RankShare(res.rank, node_rank, first, n, res.cores, res.gpus,
                                tuple(order[node_rank]) if order else ()))
        first += n
    if first == 0:
        raise ValueError("the job has no tasks to run")
    return JobLayout(first, len(ranks), tuple(shares))


# ----------------------------------------------------------------------------- environment


def base_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the worker's environment every task starts from (:data:`BASE_VARIABLES`)."""
    env = {name: environ[name] for name in BASE_VARIABLES if name in environ}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def job_environment(base: Mapping[str, str], overlay: Any) -> dict[str, str]:
    """``base`` overlaid with the job's environment; a null value unsets the variable."""
    env = dict(base)
    if overlay is None:
        return env
    if not isinstance(overlay, Mapping):
        raise ValueError("attributes.system.environment must be a mapping")
    for name, value in overlay.items():
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"attributes.system.environment: bad variable name {name!r:.40}")
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str):
            if "\0" in value:
                raise ValueError(f"attributes.system.environment.{name}: contains a NUL byte")
            env[name] = value
        else:
            raise ValueError(f"attributes.system.environment.{name}: must be a string or null")
    return env


def _idlist(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def task_environment(job_env: Mapping[str, str], *, jobid: int, layout: JobLayout,
                     share: RankShare, task: Task, cwd: str, uri: str | None = None,
                     gpu_affinity: Any = None) -> dict[str, str]:
    """The full environment of ``task``: the job's plus the ``FLUXES_*`` facts.

    ``FLUXES_JOB_ID`` is the F58 id and ``FLUXES_JOB_ID_DEC`` the decimal one;
    ``FLUXES_TASK_RANK``/``FLUXES_TASK_LOCAL_ID`` place the task in the job and
    on its node, ``FLUXES_JOB_SIZE``/``FLUXES_JOB_NNODES`` size the job,
    ``FLUXES_NODE_RANK`` is the rank's index among the job's ranks and
    ``FLUXES_EXEC_RANK`` the instance's rank number.  ``CUDA_VISIBLE_DEVICES``
    lists the rank's GPUs (``gpu-affinity`` ``per-task``: the task's own;
    ``off``: left alone).  These facts override the job's own values.
    """
    env = dict(job_env)
    env.update({
        "FLUXES_JOB_ID": _jobid.encode(jobid, "f58"),
        "FLUXES_JOB_ID_DEC": str(jobid),
        "FLUXES_JOB_SIZE": str(layout.size),
        "FLUXES_JOB_NNODES": str(layout.nnodes),
        "FLUXES_TASK_RANK": str(task.rank),
        "FLUXES_TASK_LOCAL_ID": str(task.local_id),
        "FLUXES_NODE_RANK": str(share.node_rank),
        "FLUXES_EXEC_RANK": str(share.rank),
        "PWD": cwd,
    })
    if uri:
        env["FLUXES_URI"] = uri
    if gpu_affinity != "off" and share.gpus:
        gpus = task.gpus if gpu_affinity == "per-task" else share.gpus
        env["CUDA_VISIBLE_DEVICES"] = _idlist(gpus)
    return env


# ----------------------------------------------------------------------------- output


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """Output path templates per stream; None means "forward to the output stream"."""

    stdout: str | None
    stderr: str | None


def output_spec(jobspec: Mapping[str, Any]) -> OutputSpec:
    """Read ``attributes.system.shell.options.output``.

    A stream goes to a file when its entry has ``type: file`` (or no type)
    and a ``path``.  When only stdout names a file, stderr goes to the same
    file, as with flux's ``--output`` without ``--error``.
    """
    output = shell_option(jobspec, "output")
    if output is None:
        return OutputSpec(None, None)
    if not isinstance(output, Mapping):
        raise ValueError("attributes.system.shell.options.output must be a mapping")

    def path_of(stream: str) -> str | None:
        entry = output.get(stream)
        if entry is None:
            return None
        if not isinstance(entry, Mapping):
            raise ValueError(f"shell.options.output.{stream} must be a mapping")
        if entry.get("type", "file") != "file":
            return None
        path = entry.get("path")
        if path is None:
            return None
        if not isinstance(path, str) or not path:
            raise ValueError(f"shell.options.output.{stream}.path must be a non-empty string")
        return path

    stdout = path_of("stdout")
    stderr = path_of("stderr")
    if stderr is None and stdout is not None and "stderr" not in output:
        stderr = stdout
    return OutputSpec(stdout, stderr)


def expand_template(template: str, *, jobid: int, name: str = "job",
                    taskid: int | None = None, rank: int | None = None) -> str:
    """Expand the ``{{...}}`` tags of an output path template.

    ``{{id}}`` and ``{{jobid}}`` give the F58 job id, ``{{id.FORM}}`` another
    encoding (dec, hex, dothex, kvs, f58, f58plain, words), ``{{name}}`` the
    job name (``/`` replaced by ``_``), ``{{taskid}}`` the task rank and
    ``{{rank}}`` the execution rank.  ValueError for any other tag.
    """

    def one(match: re.Match[str]) -> str:
        tag = match.group(1)
        head, _, form = tag.partition(".")
        if head in ("id", "jobid"):
            try:
                return _jobid.encode(jobid, form or "f58")
            except ValueError:
                raise ValueError(f"output path {template!r}: unknown job id form "
                                 f"{form!r}") from None
        if tag == "name":
            return name.replace("/", "_")
        if tag == "taskid" and taskid is not None:
            return str(taskid)
        if tag == "rank" and rank is not None:
            return str(rank)
        raise ValueError(f"output path {template!r}: unknown template {{{{{tag}}}}}")

    return _TEMPLATE.sub(one, template)


# ----------------------------------------------------------------------------- status, commands


def wait_status(code: int) -> int:
    """The POSIX wait status behind a shell's ``$?`` (exit code, or 128 + signal).

    A shell reports a task killed by signal N as 128 + N, so codes 129..192
    read as "killed by signal"; a task that really exits with such a code is
    reported as killed (the shell cannot tell the two apart).
    """
    if 128 < code <= 128 + _MAX_SIGNAL:
        return code - 128
    return (code & 0xFF) << 8


def command_error(argv0: str, path: str | None, cwd: str) -> str | None:
    """Why ``argv0`` cannot be executed (see :func:`find_command`), or None."""
    return None if (found := find_command(argv0, path, cwd)).startswith("/") else found


def find_command(argv0: str, path: str | None, cwd: str) -> str:
    """The file ``argv0`` runs from ``cwd`` with ``PATH=path`` (execvp's search; an empty
    entry is ``cwd``), else why not (a message, never starting with ``/``)."""
    if not argv0:
        return f"cannot execute {argv0!r}: {os.strerror(errno.ENOENT)}"
    if "/" in argv0:
        candidates = [os.path.join(cwd, argv0)]
    else:
        entries = (path if path is not None else DEFAULT_PATH).split(":")
        candidates = [os.path.join(cwd, entry or ".", argv0) for entry in entries]
    found_unusable = False
    for candidate in candidates:
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) and os.access(candidate, os.X_OK):
            return candidate if os.path.isabs(candidate) else os.path.join(os.getcwd(), candidate)
        found_unusable = True  # not executable, a directory, a device: execve says EACCES
    code = errno.EACCES if found_unusable else errno.ENOENT
    return f"cannot execute {argv0!r}: {os.strerror(code)}"
