"""flux's job-shell options of ``submit``/``run``/``batch``/``alloc``: the
per-resource request (``--cores``, ``--tasks-per-node``, ``--tasks-per-core``,
``--gpus-per-node``), ``--input`` and ``--signal`` into the jobspec (the rules
are :mod:`fluxes.formats.shellopts`; imported only when a jobspec is built)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import die

if TYPE_CHECKING:
    from fluxes.formats.jobspec import Jobspec

__all__ = ["per_resource", "per_resource_jobspec", "shell_options"]


def shell_options(args: argparse.Namespace, attributes: dict[str, Any]) -> None:
    """``--input`` and ``--signal`` into ``attributes.system.shell.options``."""
    given = [getattr(args, name, None) for name in ("input", "stdin_data", "signal")]
    if all(value is None for value in given):
        return  # not even the module below is imported (start-up time, issue 26)
    from fluxes.formats.shellopts import input_option, parse_signal_option

    options: dict[str, Any] = {}
    try:
        if getattr(args, "input", None) is not None:
            options["input"] = input_option(path=args.input)
        elif getattr(args, "stdin_data", None) is not None:
            options["input"] = input_option(data=args.stdin_data)
        if getattr(args, "signal", None) is not None:
            options["signal"] = parse_signal_option(args.signal)
    except ValueError as exc:
        die(str(exc))
    if options:
        system = attributes.setdefault("system", {})
        shell = system.setdefault("shell", {}) if isinstance(system, dict) else None
        if not isinstance(shell, dict) or not isinstance(shell.setdefault("options", {}), dict):
            die("--setattr: system.shell.options must be a table")
        shell["options"].update(options)


def per_resource(args: argparse.Namespace) -> bool:
    """True for flux's per-resource request (``--cores``, ``--tasks-per-*``,
    ``--gpus-per-node``), checking it is not mixed with the per-task options."""
    chosen = [flag for dest, flag in (("cores", "--cores"), ("tasks_per_node", "--tasks-per-node"),
                                      ("tasks_per_core", "--tasks-per-core"),
                                      ("gpus_per_node", "--gpus-per-node"))
              if getattr(args, dest, None) is not None]
    if not chosen:
        return False
    if args.gpus_per_node is not None and args.nodes is None:
        die("--gpus-per-node requires -N/--nodes")
    given = [flag for flag, value in (("-n", args.ntasks), ("-c", args.cores_per_task),
                                      ("-g", args.gpus_per_task)) if value is not None]
    if given:
        if chosen == ["--gpus-per-node"]:
            die(f"--gpus-per-node cannot be combined with {', '.join(given)} (it runs one "
                "task per node)")
        die(f"{', '.join(chosen)} cannot be combined with {', '.join(given)} (per-resource "
            "and per-task options do not mix)")
    if args.tasks_per_node is not None and args.tasks_per_core is not None:
        die("--tasks-per-node and --tasks-per-core cannot be combined")
    return True


def per_resource_jobspec(args: argparse.Namespace, command: list[str],
                          attributes: dict[str, Any], constraints: Any, deps: list[Any],
                          urgency: int | None, environment: dict[str, str | None]) -> Jobspec:
    """flux's per-resource jobspec: resources sized by nodes/cores, tasks counted by the
    job shell from what was allocated (``shell.options.per-resource``)."""
    from fluxes.formats.jobspec import Jobspec
    from fluxes.formats.shellopts import per_resource_option, per_resource_shape

    # as in flux: -N without --cores asks for whole nodes
    exclusive = bool(args.exclusive or (args.nodes is not None and args.cores is None))
    try:
        top = per_resource_shape(ncores=args.cores, nnodes=args.nodes,
                                 gpus_per_node=args.gpus_per_node, exclusive=exclusive)
        per = None
        if args.tasks_per_node is not None:
            per = per_resource_option("node", args.tasks_per_node)
        elif args.tasks_per_core is not None:
            per = per_resource_option("core", args.tasks_per_core)
    except ValueError as exc:
        die(str(exc))
    if per is not None:
        system = attributes.setdefault("system", {})
        options = system.setdefault("shell", {}).setdefault("options", {})
        options["per-resource"] = per
    spec = Jobspec.from_command(
        command, duration=args.time_limit or 0.0, queue=args.queue, name=args.job_name,
        cwd=args.cwd or os.getcwd(), environment=environment,
        constraints=constraints, dependencies=deps or None, output=args.output,
        error=args.error, attributes=attributes or None, urgency=urgency)
    return spec.with_shape([top], {"per_slot": 1})
