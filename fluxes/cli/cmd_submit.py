"""``fluxes submit``, ``fluxes cancel`` and ``fluxes job urgency``: flux's options and output."""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.cli.display import fmt_id, shown_id
from fluxes.cli.progress import Progress
from fluxes.cli.submitwait import add_cc_options, add_wait_options
from fluxes.cli.util import (
    UsageError,
    die,
    help_with_example,
    instance,
    job_id_arg,
    print_json,
    time_limit_arg,
)
from fluxes.domain.jm.priority import parse_urgency
from fluxes.errors import FluxesError
from fluxes.formats.idset import IDSet

if TYPE_CHECKING:
    from collections.abc import Callable

    from fluxes.formats.jobspec import Jobspec
    from fluxes.store.instance import Instance


def add_job_options(parser: argparse.ArgumentParser) -> None:
    """The resource and attribute options ``submit`` and ``run`` share (flux's names)."""
    res = parser.add_argument_group("resources")
    res.add_argument("-N", "--nodes", type=int, metavar="N", help="number of nodes")
    res.add_argument("-n", "--ntasks", type=int, default=None, metavar="N",
                     help="number of tasks (default 1, or one per node with -N)")
    res.add_argument("-c", "--cores-per-task", type=int, default=None, metavar="N",
                     help="cores per task (default 1)")
    res.add_argument("-g", "--gpus-per-task", type=int, default=None, metavar="N")
    res.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                     help="with -N: N GPUs on each node, one task per node (not with -n, -c, "
                          "-g)")
    res.add_argument("-x", "--exclusive", action="store_true", help="whole nodes")
    res.add_argument("--cores", type=int, default=None, metavar="N",
                     help="N cores in all (with -N: spread evenly); one task per core unless "
                          "--tasks-per-node/--tasks-per-core (not with -n, -c, -g)")
    res.add_argument("--tasks-per-node", type=int, default=None, metavar="N",
                     help="N tasks on each node allocated (not with -n, -c, -g)")
    res.add_argument("--tasks-per-core", type=int, default=None, metavar="N",
                     help="N tasks on each core allocated (not with -n, -c, -g)")
    res.add_argument("--requires", action="append", default=[], metavar="EXPR",
                     help="constraint, e.g. 'gpu', '^login', 'host:node[0-3]' (repeatable)")
    attrs = parser.add_argument_group("job attributes")
    attrs.add_argument("-t", "--time-limit", metavar="MIN|FSD|[D-]H:M:S", type=time_limit_arg,
                       default=None,
                       help="minutes, a duration such as 30s, 10m, 2h, or Slurm's M:S, "
                            "H:M:S, D-H, D-H:M, D-H:M:S")
    attrs.add_argument("-q", "--queue", metavar="QUEUE")
    attrs.add_argument("-B", "--bank", metavar="BANK",
                       help="charge the job to BANK (default: your default bank)")
    # No default here: without --urgency the client submits with the jobspec's
    # own urgency, and the instance applies its default when there is none.
    attrs.add_argument("--urgency", default=None, metavar="N",
                       help="0-31, hold, expedite or default (16)")
    attrs.add_argument("--dependency", action="append", default=[], metavar="DEP",
                       help="e.g. afterok:ID, afterany:ID, begin-time:+1h (repeatable)")
    attrs.add_argument("--env", action="append", default=[], metavar="RULE",
                       help="VAR=VAL sets, VAR copies, -PATTERN removes (default: copy all)")
    attrs.add_argument("--env-remove", action="append", default=[], metavar="PATTERN")
    attrs.add_argument("--cwd", metavar="DIR", help="working directory (default: current)")
    attrs.add_argument("--job-name", metavar="NAME")
    attrs.add_argument("--output", metavar="TEMPLATE", help="stdout file, e.g. job-{{id}}.out")
    attrs.add_argument("--error", metavar="TEMPLATE", help="stderr file")
    attrs.add_argument("--input", metavar="FILE",
                       help="stdin of every task from FILE (relative to the working directory)")
    attrs.add_argument("--signal", metavar="[SIG][@TIME]", default=None,
                       help="send SIG TIME before the time limit (default SIGUSR1@60)")
    attrs.add_argument("--setattr", action="append", default=[], metavar="KEY=VAL",
                       help="set a jobspec attribute, e.g. system.exec.test.run_duration=1s")
    attrs.add_argument("-o", "--setopt", action="append", default=[], metavar="OPT[=VAL]",
                       help="set a shell option, e.g. pmi=off, cpu-affinity=per-task "
                            "(VAL read as JSON when it parses; default 1)")
    attrs.add_argument("--taskmap", metavar="SCHEME[:VALUE]",
                       help="task rank order: block (default), cyclic, cyclic:N, manual:MAP")


def environment_from(rules: list[str], removes: list[str]) -> dict[str, str | None]:
    """The job environment flux would build: the current one, minus --env-remove
    patterns, then each --env rule in order (``-PATTERN`` removes, ``NAME=VALUE``
    sets with $VAR expansion, ``PATTERN`` copies matching variables)."""
    env: dict[str, str | None] = dict(os.environ)
    ordered = [f"-{p}" for p in removes] + list(rules)
    for rule in ordered:
        if rule.startswith("-"):
            pattern = rule[1:]
            if not pattern:
                die(f"--env: bad rule {rule!r}")
            for name in [n for n in env if fnmatch.fnmatchcase(n, pattern)]:
                del env[name]
            continue
        name, sep, value = rule.partition("=")
        if not name:
            die(f"--env: bad rule {rule!r}")
        if sep:
            env[name] = _expand(value, env)
        else:
            for key, val in os.environ.items():
                if fnmatch.fnmatchcase(key, name):
                    env[key] = val
    return env


def _expand(value: str, env: dict[str, str | None]) -> str:
    """$VAR and ${VAR} from the environment being built; an unknown name is an error."""
    import re

    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        found = env.get(name)
        if found is None:
            die(f"--env: ${name} is not set")
        return found

    return re.sub(r"\$(?:\{(\w+)\}|(\w+))", sub, value)


def _set_attr(attributes: dict[str, Any], text: str) -> None:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        die(f"--setattr: expected KEY=VAL, got {text!r}")
    if not key.startswith(("system.", "user.")):
        key = "system." + key
    value: Any = raw
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    node = attributes
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            die(f"--setattr: {key} is inside a value that is not a table")
    node[parts[-1]] = value


def _set_shell_options(attributes: dict[str, Any], args: argparse.Namespace) -> None:
    """``-o OPT[=VAL]`` and ``--taskmap``: ``attributes.system.shell.options`` (flux's)."""
    texts = list(getattr(args, "setopt", None) or [])
    taskmap = getattr(args, "taskmap", None)
    if taskmap is not None:
        from fluxes.domain.exec.taskorder import parse_taskmap

        try:
            parse_taskmap(taskmap)
        except ValueError as exc:
            raise UsageError(f"--taskmap: {exc}") from None
        scheme, _sep, tail = taskmap.partition(":")
        texts.append("taskmap=" + orjson.dumps({"scheme": scheme, "value": tail}).decode())
    for text in texts:
        name, sep, raw = text.partition("=")
        if not name:
            raise UsageError(f"-o/--setopt: expected OPT[=VAL], got {text!r}")
        parsed: Any = 1
        if sep:
            try:
                parsed = orjson.loads(raw)
            except orjson.JSONDecodeError:
                parsed = raw
        system = attributes.setdefault("system", {})
        shell = system.setdefault("shell", {}) if isinstance(system, dict) else None
        options = shell.setdefault("options", {}) if isinstance(shell, dict) else None
        if not isinstance(options, dict):
            raise UsageError("-o/--setopt: attributes.system.shell.options is not a table")
        options[name] = parsed


def _set_bank(attributes: dict[str, Any], bank: str) -> None:
    """``-B/--bank``: flux-accounting's ``attributes.system.bank``."""
    system = attributes.get("system")
    if not isinstance(system, dict):
        system = attributes["system"] = {}
    system["bank"] = bank


def build_jobspec(args: argparse.Namespace, command: list[str]) -> Jobspec:
    """The jobspec the options describe (``args.command`` or a jobspec file).

    ``--urgency`` goes into a command's Jobspec as its submission default; a
    jobspec file cannot hold one (RFC 14 has no urgency), so for a file the
    caller must send it with the submission.
    """
    from fluxes.formats.jobspec import Jobspec

    if len(command) == 1 and command[0].endswith((".yaml", ".yml", ".json")) \
            and os.path.isfile(command[0]):
        return _from_file(args, command[0])
    attributes: dict[str, Any] = {}
    for text in args.setattr:
        _set_attr(attributes, text)
    _set_shell_options(attributes, args)
    if getattr(args, "bank", None):
        _set_bank(attributes, args.bank)
    constraints = _requires(args.requires) if args.requires else None
    now = time.time()
    deps = [_dependency(d, now) for d in args.dependency]
    urgency = None if args.urgency is None else parse_urgency(args.urgency)
    from fluxes.cli.jobshape import per_resource, per_resource_jobspec, shell_options

    shell_options(args, attributes)
    if per_resource(args):
        return per_resource_jobspec(args, command, attributes, constraints, deps, urgency,
                                    environment_from(args.env, args.env_remove))
    # -N without -n runs a task per node; a bad -N must not be blamed on ntasks
    nodes_ok = args.nodes is not None and not isinstance(args.nodes, bool) and args.nodes >= 1
    return Jobspec.from_command(
        command, nnodes=args.nodes,
        ntasks=args.ntasks if args.ntasks is not None else (args.nodes if nodes_ok else 1),
        cores_per_task=args.cores_per_task if args.cores_per_task is not None else 1,
        gpus_per_task=args.gpus_per_task, gpus_per_node=args.gpus_per_node,
        # as in flux: -N without -n asks for whole nodes
        exclusive=args.exclusive or (args.nodes is not None and args.ntasks is None),
        duration=args.time_limit or 0.0, queue=args.queue, name=args.job_name,
        cwd=args.cwd or os.getcwd(), environment=environment_from(args.env, args.env_remove),
        constraints=constraints, dependencies=deps or None, output=args.output,
        error=args.error, attributes=attributes or None, urgency=urgency)


def _requires(exprs: list[str]) -> dict[str, Any]:
    """``--requires`` as an RFC 31 constraint (imported only when given)."""
    from fluxes.formats.requires import parse_requires

    return parse_requires(exprs)


def _dependency(text: str, now: float) -> dict[str, Any]:
    """One ``--dependency`` as an RFC 26 object (imported only when given: the
    dependency module brings the job model along)."""
    from fluxes.domain.jm.depend import parse_dependency

    return parse_dependency(text, now=now)


#: Options that shape the tasks and resources a jobspec file already describes:
#: (argparse dest, flag, default).
_SHAPE_OPTIONS: tuple[tuple[str, str, object], ...] = (
    ("nodes", "-N", None), ("ntasks", "-n", None), ("cores_per_task", "-c", None),
    ("gpus_per_task", "-g", None), ("gpus_per_node", "--gpus-per-node", None),
    ("exclusive", "-x", False), ("cores", "--cores", None),
    ("tasks_per_node", "--tasks-per-node", None), ("tasks_per_core", "--tasks-per-core", None),
    ("requires", "--requires", []),
    ("env", "--env", []), ("env_remove", "--env-remove", []), ("cwd", "--cwd", None),
    ("output", "--output", None), ("error", "--error", None),
)


def _from_file(args: argparse.Namespace, path: str) -> Jobspec:
    """A jobspec file, with the attribute options (-t, -q, --job-name, --dependency,
    --setattr) applied on top; options that would reshape it are refused."""
    from fluxes.domain.jm.depend import parse_dependency
    from fluxes.formats.jobspec import Jobspec

    given = [flag for dest, flag, default in _SHAPE_OPTIONS
             if getattr(args, dest, default) != default]
    if given:
        die(f"{path}: {', '.join(given)} cannot change a jobspec file (edit the file; "
            "-t, -q, --job-name, --dependency, --setattr, --urgency and --cc apply)")
    spec = Jobspec.from_file(path)
    if not (args.time_limit or args.queue or args.job_name or args.dependency
            or args.setattr or getattr(args, "bank", None) or getattr(args, "setopt", None)
            or getattr(args, "taskmap", None)
            or getattr(args, "input", None) is not None
            or getattr(args, "signal", None) is not None):
        return spec
    doc = spec.to_dict()
    attributes = doc.setdefault("attributes", {})
    for text in args.setattr:
        _set_attr(attributes, text)
    _set_shell_options(attributes, args)
    from fluxes.cli.jobshape import shell_options

    shell_options(args, attributes)
    system = attributes.setdefault("system", {})
    if args.time_limit:
        system["duration"] = args.time_limit
    if args.queue:
        system["queue"] = args.queue
    if getattr(args, "bank", None):
        _set_bank(attributes, args.bank)
    if args.job_name:
        if not isinstance(system.get("job"), dict):
            system["job"] = {}
        system["job"]["name"] = args.job_name
    if args.dependency:
        now = time.time()
        system["dependencies"] = [*(system.get("dependencies") or []),
                                  *(parse_dependency(d, now=now) for d in args.dependency)]
    return Jobspec.from_dict(doc)


def register(subparsers: Any) -> None:
    """Add ``submit`` and ``cancel``."""
    sp = subparsers.add_parser("submit", **help_with_example(
        "Submit a job (or a jobspec file) and print its id.",
        ["fluxes submit -n4 -c2 ./app --input x", "fluxes submit -N2 -x -t 1h ./mpi_app",
         "fluxes submit -N2 --gpus-per-node=2 ./gpu_app",
         "fluxes submit --cc=1-100 --setattr=exec.test.run_duration=1s true",
         "fluxes submit --wait --quiet ./app", "fluxes submit --watch --cc=1-4 echo {cc}",
         "fluxes submit --dependency=afterok:ƒ2t6V2H ./post.sh", "fluxes submit job.yaml"]))
    add_job_options(sp)
    add_cc_options(sp)
    add_wait_options(sp)
    sp.add_argument("--progress", action="store_true", help="show a progress bar")
    sp.add_argument("--dry-run", action="store_true", help="print the jobspec, do not submit")
    sp.add_argument("--json", action="store_true", help="print {id, error} objects")
    sp.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    # the small Redis client (fluxes.store.lite): submit only posts and waits for replies;
    # it leaves no file open to the interpreter's teardown, which it skips (main.quick_exit)
    sp.set_defaults(func=_submit, _lite=True, _quick_exit=True)

    rp = subparsers.add_parser("run", **help_with_example(
        "Submit a job, print its output as it runs, exit with its exit code.",
        ["fluxes run -N2 -n4 hostname", "fluxes run -n1 -t 10s ./app", "fluxes run -l -n4 env",
         "fluxes run -N2 --gpus-per-node=1 -l printenv CUDA_VISIBLE_DEVICES"]))
    add_job_options(rp)
    rp.add_argument("-l", "--label-io", action="store_true", help="prefix lines with task rank")
    rp.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    # the small Redis client (fluxes.store.lite): run posts, then reads the job's streams
    # (and skips the interpreter's teardown, as submit)
    rp.set_defaults(func=_run, _lite=True, _quick_exit=True)

    cp = subparsers.add_parser("cancel", **help_with_example(
        "Cancel jobs (a 'cancel' exception); users may cancel only their own.",
        ["fluxes cancel ƒ2t6V2H ƒ2t6V2J", "fluxes cancel --all",
         "fluxes cancel --all --states=pending -m 'wrong input'"]))
    cp.add_argument("ids", nargs="*", type=job_id_arg, metavar="ID")
    cp.add_argument("--all", action="store_true", help="all your active jobs (see --states)")
    cp.add_argument("-u", "--user", metavar="USER", help="with --all: this user's jobs")
    cp.add_argument("-S", "--states", default="active", metavar="STATES",
                    help="with --all: pending, running or active (default)")
    cp.add_argument("-m", "--message", default="", metavar="NOTE")
    cp.add_argument("-q", "--quiet", action="store_true")
    cp.set_defaults(func=_cancel)


def register_job(sub: Any) -> None:
    """Add ``job urgency`` and ``job raise`` under ``fluxes job``."""
    up = sub.add_parser("urgency", **help_with_example(
        "Change a pending job's urgency (0 holds, 31 expedites; owner only above 16).",
        ["fluxes job urgency ƒ2t6V2H 0", "fluxes job urgency ƒ2t6V2H default"]))
    up.add_argument("-v", "--verbose", action="store_true", help="print the old urgency")
    up.add_argument("id", type=job_id_arg, metavar="ID")
    up.add_argument("urgency", metavar="N")
    up.set_defaults(func=_urgency)
    rp = sub.add_parser("raise", **help_with_example(
        "Raise an exception on jobs (severity 0 ends them).",
        ["fluxes job raise --type=test ƒ2t6V2H", "fluxes job raise -s 3 -m note ƒ2t6V2H"]))
    rp.add_argument("-s", "--severity", type=int, default=0)
    rp.add_argument("-t", "--type", default="exception")
    rp.add_argument("-m", "--message", default="")
    rp.add_argument("ids", nargs="+", type=job_id_arg, metavar="ID")
    rp.set_defaults(func=_raise)


#: The most copies one ``submit --cc`` makes.
MAX_CC = 1_000_000


def _cc_ids(cc: str) -> IDSet:
    """The ids of ``--cc``; FluxesError when there are none, or too many."""
    try:
        ids = IDSet(cc)
    except ValueError as exc:
        raise FluxesError(f"--cc: {exc}") from None
    if not ids:
        raise FluxesError(f"--cc: {cc!r} names no id (e.g. --cc=1-10)")
    if len(ids) > MAX_CC:
        # a typo such as 1-1000000000 would create jobs until the queue is full
        raise FluxesError(f"--cc: {cc!r} is {len(ids)} copies, at most {MAX_CC} per submit")
    return ids


def _cc_copies(spec: Jobspec, cc: str | None, mark: bool = True) -> list[dict[str, Any]]:
    """One jobspec per --cc/--bcc id, with {cc} substituted where flux substitutes it;
    with ``mark`` (--cc, not --bcc) each copy's environment also gets
    ``FLUXES_JOB_CC=<id>``, as flux's ``FLUX_JOB_CC`` (``--dry-run``; a submission
    sends the copies as array requests instead, and the ingest makes them alike)."""
    if cc is None:
        return [spec.to_dict()]
    ids = _cc_ids(cc)
    base = spec.to_dict()
    text = spec.dumps()
    if "{cc}" not in text:
        copies = [base] * len(ids)
    else:
        copies = [orjson.loads(text.replace("{cc}", str(i))) for i in ids]
    if mark:
        from fluxes.domain.jm.arrays import with_cc_variable

        copies = [with_cc_variable(doc, i) for doc, i in zip(copies, ids, strict=True)]
    return copies


def _submit(args: argparse.Namespace) -> int:
    from fluxes.cli.submitwait import finish

    command = _command(args)
    urgency = None if args.urgency is None else parse_urgency(args.urgency)
    spec = build_jobspec(args, command)
    cc = args.cc if args.cc is not None else args.bcc
    if args.dry_run:
        for copy in _cc_copies(spec, cc, args.bcc is None):
            print_json(copy)
        return 0
    if args.watch or args.wait or args.wait_event:
        # following the jobs reads streams and the event store the small client
        # (fluxes.store.lite) does not serve: the full client, as other commands
        args._lite = False
    inst = instance(args)
    if cc is None:
        bar = Progress("submit", 1, enabled=args.progress)
        results = submit_one(inst, spec, urgency, progress=bar.update)
    else:
        from fluxes.store.client import Client

        # array requests: whatever the range, each request is small and within the
        # instance's per-request limit, and the ingest makes the copies (--cc also
        # sets FLUXES_JOB_CC in each, --bcc does not)
        ids = _cc_ids(cc)
        bar = Progress("submit", len(ids), enabled=args.progress)
        # None (no --urgency) lets the client fall back to the Jobspec's urgency.
        results = Client(inst).submit_array({"jobspec": spec, "urgency": urgency}, ids,
                                            progress=bar.update, cc_var=args.bcc is None)
    bar.done()
    return finish(args, inst, results, as_json=args.json)


def submit_one(inst: Instance, spec: Jobspec, urgency: int | None,
               progress: Callable[[int], None] | None = None) -> list[int | str]:
    """``Client(inst).submit`` of one job (its id or refusal), through the path that
    needs no message module (fluxes.store.lite_submit: start-up time, issue 26)
    unless the request is too large for it. None (no --urgency) lets the
    Jobspec's urgency apply."""
    from fluxes.store.lite_submit import submit_one as quick

    results = quick(inst, spec, urgency)
    if results is None:
        from fluxes.store.client import Client

        return Client(inst).submit([{"jobspec": spec, "urgency": urgency}],
                                   progress=progress)
    if progress is not None:
        progress(len(results))
    return results


def _run(args: argparse.Namespace) -> int:
    from fluxes.cli.attach import follow_interruptible

    command = _command(args)
    if args.input is None:
        args.stdin_data = _stdin_to_forward()
    spec = build_jobspec(args, command)
    inst = instance(args)
    urgency = None if args.urgency is None else parse_urgency(args.urgency)
    [result] = submit_one(inst, spec, urgency)
    if not isinstance(result, int):
        die(result)
    # the jobspec is ours: where its output goes needs no read of the job
    outcome = follow_interruptible(inst, result, label=args.label_io,
                                   jobspec_text=spec.dumps())
    message = outcome.message()
    if message:
        print(f"fluxes: {message}", file=sys.stderr)
    return outcome.exit_code


def _stdin_to_forward() -> bytes | None:
    """What ``fluxes run`` forwards to task 0: its stdin when it is a regular file
    (``fluxes run cat < file``), read whole; None otherwise (a terminal, /dev/null,
    a pipe: a pipe is not read, as nothing says when its writer will close it)."""
    import stat

    from fluxes.formats.shellopts import MAX_STDIN_BYTES

    try:
        if not stat.S_ISREG(os.fstat(0).st_mode):
            return None
        with open(0, "rb", closefd=False) as src:
            data = src.read(MAX_STDIN_BYTES + 1)
    except OSError:
        return None
    return data or None


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        # a usage error, as flux's "job command and arguments are missing"
        prog = getattr(args, "_prog", "fluxes")
        raise UsageError(f"{prog}: no command or jobspec file given "
                         f"(usage: {prog} [OPTIONS] COMMAND... or FILE.yaml|.json; "
                         f"see {prog} --help)")
    return command


def _cancel(args: argparse.Namespace) -> int:
    from fluxes.service.jobs import select_jobs  # not at import: submit and run do not list jobs
    from fluxes.store.client import Client

    inst = instance(args)
    client = Client(inst)
    ids = list(args.ids)
    if args.all:
        ids += [s.id for s in select_jobs(inst, states=args.states, user=args.user or
                                          client.user)]
    elif not ids:
        die("cancel: give job ids, or --all")
    if not ids:
        if not args.quiet:
            print("fluxes: no matching jobs", file=sys.stderr)
        return 0
    answer = client.cancel([int(i) for i in ids], note=args.message)
    for line in answer["errors"]:
        print(f"fluxes: {as_typed(line, ids)}", file=sys.stderr)
    if args.all and not args.quiet:
        print(f"fluxes: canceled {len(answer['ok'])} jobs", file=sys.stderr)
    return 1 if answer["errors"] else 0


def _urgency(args: argparse.Namespace) -> int:
    from fluxes.store.client import Client

    urgency = parse_urgency(args.urgency)
    answer = Client(instance(args)).urgency(int(args.id), urgency)
    if answer["errors"]:
        die(as_typed(str(answer["errors"][0]), [args.id]))
    if args.verbose:
        print(f"{fmt_id(args.id)}: urgency changed from {answer.get('old')} to {urgency}")
    return 0


def _raise(args: argparse.Namespace) -> int:
    from fluxes.store.client import Client

    answer = Client(instance(args)).raise_exception([int(i) for i in args.ids], args.type,
                                                    args.severity, args.message)
    for line in answer["errors"]:
        print(f"fluxes: {as_typed(line, args.ids)}", file=sys.stderr)
    return 1 if answer["errors"] else 0


def as_typed(line: str, ids: list[int]) -> str:
    """An error line of the job manager (``ƒXYZ: job is inactive or unknown``) with
    the id it starts with shown as the user typed it."""
    head, sep, rest = line.partition(": ")
    if sep:
        for jobid in ids:
            if head == fmt_id(jobid):
                return f"{shown_id(jobid)}: {rest}"
    return line
