"""Job-shell options the submit commands write into a jobspec, in flux's forms.

* :func:`per_resource_shape`: the resources of flux's "per-resource" request
  (``--cores=N``, ``--tasks-per-node=N``, ``--tasks-per-core=N``,
  ``--gpus-per-node=N``): slots of cores on nodes, the tasks counted by the
  job shell from what was allocated (``attributes.system.shell.options.
  per-resource = {"type": "node"|"core", "count": N}``) rather than from
  the jobspec's slots;
* :func:`parse_signal_option`: ``--signal=[SIG][@TIME]``
  (``shell.options.signal = {"signum": N, "timeleft": SECONDS}``, SIGUSR1
  60 s before the time limit by default);
* :func:`input_option`: ``--input=FILE`` (``shell.options.input.stdin =
  {"type": "file", "path": FILE}``) and stdin captured by ``fluxes run``
  (``{"type": "data", "encoding": "base64", "data": ...}``, fluxes' own
  form: flux streams it instead).

Pure: no I/O.  Bad values raise :class:`ValueError` with a one-line message
naming the option.
"""

from __future__ import annotations

import base64
import math
import signal
from typing import Any, Final

from fluxes.formats import fsd

__all__ = ["DEFAULT_SIGNAL", "DEFAULT_TIMELEFT", "MAX_STDIN_BYTES", "input_option",
           "parse_signal_name", "parse_signal_option", "per_resource_count",
           "per_resource_option", "per_resource_shape", "stdin_data"]

#: flux's defaults for ``--signal`` without SIG or TIME.
DEFAULT_SIGNAL: Final = int(signal.SIGUSR1)
DEFAULT_TIMELEFT: Final = 60.0

#: The most stdin ``fluxes run`` forwards (it travels inside the jobspec, whose
#: whole size is bounded by 1 MiB).
MAX_STDIN_BYTES: Final = 512 * 1024


def per_resource_count(jobspec: Any) -> dict[str, Any] | None:
    """The task count ``shell.options.per-resource`` puts in place of the jobspec's
    (``{"per_resource": {...}}``), None without it."""
    node = jobspec
    for key in ("attributes", "system", "shell", "options", "per-resource"):
        node = node.get(key) if isinstance(node, dict) else None
    return None if node is None else {"per_resource": node}


def per_resource_option(kind: str, count: int) -> dict[str, Any]:
    """``shell.options.per-resource``: ``count`` tasks per allocated ``kind`` (node, core)."""
    if kind not in ("node", "core"):
        raise ValueError(f"per-resource type must be node or core, got {kind!r}")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"--tasks-per-{kind} must be an integer >= 1, got {count!r}")
    return {"type": kind, "count": count}


def _positive(flag: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise ValueError(f"{flag} must be an integer >= 1, got {value!r}")


def per_resource_shape(*, ncores: int | None, nnodes: int | None,
                       gpus_per_node: int | None, exclusive: bool) -> dict[str, Any]:
    """The top resource vertex of a per-resource request, as flux builds it.

    ``ncores`` with ``nnodes``: one slot of ``ncores / nnodes`` cores on each
    node (it must divide evenly); ``ncores`` alone: ``ncores`` slots of one
    core; ``nnodes`` alone: one slot of one core per whole node (exclusive
    is then required, which the caller sets for ``-N`` without ``--cores``).
    ``gpus_per_node`` puts that many GPUs in each node's slot.
    """
    _positive("--cores", ncores)
    _positive("-N/--nodes", nnodes)
    if gpus_per_node is not None:
        if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) \
                or gpus_per_node < 0:
            raise ValueError(f"--gpus-per-node must be an integer >= 0, got {gpus_per_node!r}")
        if not nnodes:
            raise ValueError("--gpus-per-node requires -N/--nodes")
    if nnodes is None and exclusive:
        raise ValueError("exclusive: needs nnodes (only whole nodes are exclusive)")
    if nnodes and ncores:
        if ncores < nnodes:
            raise ValueError(f"--cores={ncores} is fewer than the {nnodes} nodes asked for")
        if ncores % nnodes:
            raise ValueError(f"--cores={ncores} does not divide evenly over {nnodes} nodes")
        nslots, size = 1, ncores // nnodes
    elif ncores:
        nslots, size = ncores, 1
    elif nnodes:
        if not exclusive:
            raise ValueError("-N without --cores needs whole nodes (-x/--exclusive)")
        nslots, size = 1, 1
    else:
        raise ValueError("--tasks-per-node/--tasks-per-core need -N/--nodes or --cores")
    children: list[dict[str, Any]] = [{"type": "core", "count": size}]
    if gpus_per_node:
        children.append({"type": "gpu", "count": gpus_per_node})
    slot = {"type": "slot", "count": nslots, "label": "task", "with": children}
    if not nnodes:
        return slot
    node: dict[str, Any] = {"type": "node", "count": nnodes}
    if exclusive:
        node["exclusive"] = True
    node["with"] = [slot]
    return node


def parse_signal_name(text: str) -> int:
    """A signal number from ``USR1``, ``SIGUSR1`` (any case) or ``10``."""
    word = text.strip()
    if word.isdigit():
        number = int(word)
        if not 0 < number < signal.NSIG:
            raise ValueError(f"signal {number} is out of range (1-{signal.NSIG - 1})")
        return number
    name = word.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueError(f"unknown signal {text!r}") from None


def parse_signal_option(text: str | None) -> dict[str, Any]:
    """``--signal=[SIG][@TIME]``: ``{"signum": N, "timeleft": SECONDS}``.

    SIG is a name or number (default SIGUSR1); TIME an RFC 23 duration, a
    bare number being seconds as in flux (default 60).
    """
    signum, timeleft = DEFAULT_SIGNAL, DEFAULT_TIMELEFT
    if text:
        sig, _, when = text.partition("@")
        try:
            if sig:
                signum = parse_signal_name(sig)
            if when:
                timeleft = fsd.parse_duration(when)
        except ValueError as exc:
            raise ValueError(f"--signal={text}: {exc}") from None
        if not math.isfinite(timeleft):
            raise ValueError(f"--signal={text}: TIME must be finite")
    return {"signum": signum, "timeleft": timeleft}


def input_option(path: str | None = None, data: bytes | None = None) -> dict[str, Any]:
    """``shell.options.input``: stdin from the file ``path`` (every task), or ``data``
    (task 0; the others read nothing), carried base64-encoded."""
    if path is not None:
        if not path:
            raise ValueError("--input: empty file name")
        return {"stdin": {"type": "file", "path": path}}
    if data is None:
        raise ValueError("input_option: give path or data")
    if len(data) > MAX_STDIN_BYTES:
        raise ValueError(f"stdin is more than {MAX_STDIN_BYTES} bytes: use --input=FILE")
    return {"stdin": {"type": "data", "encoding": "base64",
                      "data": base64.b64encode(data).decode("ascii")}}


def stdin_data(option: Any) -> bytes | None:
    """The bytes of a ``{"type": "data"}`` stdin option; None for another type.
    ValueError when it is malformed."""
    if not isinstance(option, dict) or option.get("type") != "data":
        return None
    raw = option.get("data")
    if not isinstance(raw, str):
        raise ValueError("shell.options.input.stdin.data must be a string")
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        raise ValueError("shell.options.input.stdin.data is not base64") from None
