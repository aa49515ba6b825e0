"""RFC 14 canonical jobspec (and the RFC 25 V1 subset): load, validate, inspect, build.

A :class:`Jobspec` is an immutable, validated jobspec.  Build one with
:meth:`Jobspec.from_yaml`, :meth:`Jobspec.from_file`, :meth:`Jobspec.from_dict`
or :meth:`Jobspec.from_command`; read derived totals (``nnodes``, ``nslots``,
``ncores``, ...) as properties; get the document back with
:meth:`Jobspec.to_dict` or :meth:`Jobspec.dumps`.  Bad input of any kind
raises :class:`~fluxes.errors.JobspecError` with a one-line message naming
the place.  See ``docs/formats/jobspec.md``.

YAML is read defensively because jobspecs come from users: the document
size, nesting depth and node count are bounded *before* anything deep is
built, aliases and non-JSON tags are refused, and only one document is read.

Why one module: the immutable :class:`Jobspec`, its defensive loaders (the bounded YAML
event builder, the plain-JSON copy) and :meth:`Jobspec.from_command` all produce the one
type; the validation rules are apart (:mod:`fluxes.formats.jobspec_rules`).
"""

from __future__ import annotations

import math
import os
import posixpath
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Final, cast

import orjson

from fluxes.errors import JobspecError
from fluxes.formats import fsd
from fluxes.formats.jobspec_rules import Summary, format_path, validate
from fluxes.formats.urgency import MAX_URGENCY, MIN_URGENCY

__all__ = [
    "MAX_DEPTH",
    "MAX_JOBSPEC_BYTES",
    "MAX_NODES",
    "Jobspec",
    "parse_dependency",
]

#: Largest jobspec document accepted, in bytes (UTF-8).
MAX_JOBSPEC_BYTES: Final = 1024 * 1024

#: Deepest nesting of mappings and lists accepted (RFC examples need about 12).
MAX_DEPTH: Final = 64

#: Most values (scalars plus containers) accepted in one jobspec.
MAX_NODES: Final = 200_000

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1  # orjson writes unsigned 64-bit ints too

def _short(text: str, limit: int = 40) -> str:
    """repr() of ``text``, shortened for a one-line message."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")



def _decode_text(text: str | bytes, max_bytes: int) -> str:
    """Size-check and decode a YAML/JSON document before parsing it."""
    if isinstance(text, bytes | bytearray | memoryview):
        data = bytes(text)
        if len(data) > max_bytes:
            raise JobspecError(f"jobspec is larger than {max_bytes} bytes ({len(data)})")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise JobspecError(f"jobspec is not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(text, str):
        raise JobspecError(f"jobspec text must be str or bytes, got {type(text).__name__}")
    # A character takes at least one byte: refuse the obviously too long
    # without encoding it, then measure exactly.
    if len(text) > max_bytes:
        raise JobspecError(f"jobspec is larger than {max_bytes} bytes")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise JobspecError(f"jobspec text is not valid Unicode (position {exc.start})") from None
    if size > max_bytes:
        raise JobspecError(f"jobspec is larger than {max_bytes} bytes ({size})")
    return text


# -- plain JSON values ----------------------------------------------------------------


def _plain_scalar(value: object, here: list[str | int]) -> Any:
    """A copy of the JSON scalar ``value`` at ``here`` (not a dict or list), or JobspecError."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.isascii():
            _check_unicode(value, here)
        return value
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise JobspecError(f"{format_path(here)}: integer out of range")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JobspecError(f"{format_path(here)}: {value} is not a finite number")
        return float(value)
    raise JobspecError(f"{format_path(here)}: {_kind_name(value)} is not a JSON value")


def _plain_copy(obj: object) -> Any:
    """A deep copy of ``obj`` that holds JSON types only, or JobspecError.

    Iterative so that depth is checked before anything recurses; counts every
    value so that shared references (the same list reused many times) cannot
    expand into a huge document.
    """
    if not isinstance(obj, dict):
        raise JobspecError(f"jobspec must be a mapping, got {_kind_name(obj)}")
    root: dict[str, Any] = {}
    # (source container, copy, path, depth)
    todo: list[tuple[Any, Any, list[str | int], int]] = [(obj, root, [], 1)]
    nodes = 1
    while todo:
        src, dst, path, depth = todo.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for key, value in items:
            nodes += 1
            if nodes > MAX_NODES:
                raise JobspecError(f"jobspec has more than {MAX_NODES} values")
            if isinstance(src, dict) and not isinstance(key, str):
                raise JobspecError(
                    f"{format_path(path)}: mapping key {key!r} is not a string"
                )
            here = [*path, key]
            copied: Any
            if isinstance(value, dict | list):
                if depth >= MAX_DEPTH:
                    raise JobspecError(f"jobspec is nested more than {MAX_DEPTH} levels deep")
                copied = {} if isinstance(value, dict) else []
                todo.append((value, copied, here, depth + 1))
            else:
                copied = _plain_scalar(value, here)
            if isinstance(key, str) and not key.isascii():
                _check_unicode(key, path)
            if isinstance(dst, dict):
                dst[key] = copied
            else:
                dst.append(copied)
    return root


def _check_unicode(text: str, path: list[str | int]) -> None:
    """Refuse lone surrogates, which no UTF-8 JSON document can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JobspecError(f"{format_path(path)}: string is not valid Unicode") from None


def _kind_name(value: object) -> str:
    """A short type description for messages."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


# -- dependencies ---------------------------------------------------------------------


def parse_dependency(text: str) -> dict[str, str]:
    """Turn the RFC 26 command line form ``scheme:value[?key=val[&key=val...]]`` into a dict.

    ``"afterok:f123"`` -> ``{"scheme": "afterok", "value": "f123"}``;
    ``"string:foo?type=out&scope=user"`` adds ``type`` and ``scope``.  Keys
    may also be separated by ``;``.  Raises JobspecError on malformed text.
    """
    if not isinstance(text, str):
        raise JobspecError(f"dependency: expected a string, got {_kind_name(text)}")
    scheme, sep, rest = text.partition(":")
    shown = _short(text)
    if not sep or not scheme or not rest:
        raise JobspecError(f"dependency {shown}: expected scheme:value[?key=val...]")
    value, _, query = rest.partition("?")
    if not value:
        raise JobspecError(f"dependency {shown}: the value is empty")
    dep = {"scheme": scheme, "value": value}
    if query:
        for part in query.replace(";", "&").split("&"):
            raw_key, eq, val = part.partition("=")
            if not eq or not raw_key:
                raise JobspecError(f"dependency {shown}: expected key=value, got {_short(part)}")
            # Compare decoded keys: "sch%65me=x" must not replace the scheme.
            key = urllib.parse.unquote(raw_key)
            if key in dep:
                raise JobspecError(f"dependency {shown}: key {_short(key)} given twice")
            dep[key] = urllib.parse.unquote(val)
    return dep


# -- the class --------------------------------------------------------------------------


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    """Check a from_command integer argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise JobspecError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return value


def _check_urgency(value: object) -> int:
    """Check a from_command urgency (RFC 21: 0 holds, 16 is the default, 31 expedites)."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not MIN_URGENCY <= value <= MAX_URGENCY:
        raise JobspecError(
            f"urgency: must be an integer {MIN_URGENCY}-{MAX_URGENCY}, got {value!r}"
        )
    return value


def _set_tree(root: dict[str, Any], keys: Sequence[str], value: Any) -> None:
    """root[k0][k1]...[kn] = value, creating mappings on the way."""
    node = root
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Deep-merge mapping ``extra`` into ``base`` (``extra`` wins)."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        elif isinstance(value, Mapping):
            base[key] = {}
            _merge(base[key], value)
        else:
            base[key] = value


class Jobspec:
    """A validated, immutable RFC 14 canonical jobspec.

    Construct with the ``from_*`` class methods.  Properties expose the
    derived totals (minimum counts multiplied through enclosing vertices)
    and the common attributes; mutable values are returned as copies.
    ``warnings`` lists unknown system attributes and unused slots.
    """

    __slots__ = ("_doc", "_summary", "_urgency", "_v1", "warnings")

    _doc: dict[str, Any]
    _summary: Summary
    _urgency: int | None
    _v1: bool
    warnings: list[str]

    def __init__(self, doc: dict[str, Any], summary: Summary, v1: bool,
                 urgency: int | None = None) -> None:
        """Internal: use the ``from_*`` constructors, which validate."""
        self._doc = doc
        self._summary = summary
        self._v1 = v1
        self._urgency = urgency
        self.warnings = list(summary.warnings)

    # -- constructors ------------------------------------------------------

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], v1: bool = False) -> Jobspec:
        """Validate a jobspec given as a mapping (it is deep-copied; JSON types only)."""
        if isinstance(obj, Mapping) and not isinstance(obj, dict):
            obj = dict(obj)
        return cls._from_plain(_plain_copy(obj), v1)

    @classmethod
    def from_yaml(
        cls, text: str | bytes, v1: bool = False, max_bytes: int = MAX_JOBSPEC_BYTES
    ) -> Jobspec:
        """Parse and validate a YAML (or JSON) jobspec document of at most ``max_bytes``."""
        from fluxes.formats.jobspec_yaml import load_yaml  # yaml only for YAML text

        obj = load_yaml(_decode_text(text, max_bytes))
        if not isinstance(obj, dict):
            raise JobspecError(f"jobspec must be a mapping, got {_kind_name(obj)}")
        # The loader built fresh JSON-typed values within the size, depth and
        # node limits, so the defensive copy of from_dict is not needed.
        return cls._from_plain(obj, v1)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], v1: bool = False, max_bytes: int = MAX_JOBSPEC_BYTES
    ) -> Jobspec:
        """Read, parse and validate the jobspec file at ``path``.

        Only ``max_bytes + 1`` bytes are ever read, so a huge file is refused
        without loading it.  An unreadable file is a JobspecError too; its
        message names the file (``job.yaml: No such file or directory``) and
        its ``__cause__`` is the OSError, so that a caller that prefixes its
        own lines with the file name can tell and not name it twice.
        """
        try:
            with open(path, "rb") as handle:
                data = handle.read(max_bytes + 1)
                if len(data) > max_bytes:
                    # only max_bytes + 1 were read: the message must give the file's size
                    size = os.fstat(handle.fileno()).st_size
                    raise JobspecError(f"jobspec is larger than {max_bytes} bytes"
                                       + (f" ({size})" if size > max_bytes else ""))
        except OSError as exc:
            raise JobspecError(f"{os.fspath(path)}: {exc.strerror or exc}") from exc
        return cls.from_yaml(data, v1=v1, max_bytes=max_bytes)

    @classmethod
    def _from_plain(cls, doc: dict[str, Any], v1: bool, urgency: int | None = None) -> Jobspec:
        """Validate a fresh JSON-typed dict that nobody else holds."""
        try:
            summary = validate(doc, v1=v1)
        except RecursionError:
            raise JobspecError(f"jobspec is nested more than {MAX_DEPTH} levels deep") from None
        return cls(doc, summary, v1, urgency)

    @classmethod
    def from_command(
        cls,
        command: Sequence[str],
        *,
        nnodes: int | None = None,
        ntasks: int = 1,
        cores_per_task: int = 1,
        gpus_per_task: int | None = None,
        gpus_per_node: int | None = None,
        exclusive: bool = False,
        duration: float | str = 0.0,
        queue: str | None = None,
        name: str | None = None,
        cwd: str | None = None,
        environment: Mapping[str, str | None] | None = None,
        constraints: Mapping[str, Any] | None = None,
        dependencies: Sequence[Mapping[str, Any] | str] | None = None,
        output: str | None = None,
        error: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        urgency: int | None = None,
    ) -> Jobspec:
        """Build the V1 jobspec that runs ``command`` as ``ntasks`` tasks.

        The shape follows flux's ``JobspecV1.from_command``: one slot per
        task labelled ``task`` holding ``cores_per_task`` cores (and
        ``gpus_per_task`` gpus if > 0).  Without ``nnodes`` the slot is the
        top-level resource with count ``ntasks``.  With ``nnodes`` a node
        vertex (``exclusive: true`` if asked) holds ``ceil(ntasks / nnodes)``
        slots per node, and the task count is ``per_slot: 1`` when ``ntasks``
        divides evenly, else ``total: ntasks``.  ``gpus_per_node`` (with
        ``nnodes``, not with ``gpus_per_task``) is flux's per-node request: one
        task per node, its slot holding the node's ``gpus_per_node`` gpus.
        ``duration`` is seconds or
        an RFC 23 string (0 = unset).  ``environment`` defaults to empty (the
        caller's environment is not captured: pass ``dict(os.environ)``).
        ``dependencies`` holds RFC 26 objects or ``scheme:value?key=val``
        strings.  ``output``/``error`` set shell file output.  ``attributes``
        (``{"system": ..., "user": ...}``) is deep-merged first, so explicit
        arguments win (except a 0 duration and None, which mean "not given").
        ``urgency`` (0-31) is not part of the document: RFC 14 has no such
        attribute, it is a submission option (the RFC 21 ``submit`` event
        carries it).  It is kept as :attr:`urgency`, the default a client
        submits the jobspec with.
        """
        argv = _command_argv(command)
        ntasks = _positive_int("ntasks", ntasks)
        cores_per_task = _positive_int("cores_per_task", cores_per_task)
        gpus = _gpus_per_slot(ntasks, nnodes, gpus_per_task, gpus_per_node)
        if not isinstance(exclusive, bool):
            raise JobspecError(f"exclusive: expected true or false, got {exclusive!r}")
        if urgency is not None:
            urgency = _check_urgency(urgency)
        top, task_count = _task_shape(ntasks, nnodes, cores_per_task, gpus, exclusive)
        attrs = _system_attributes(attributes, duration, environment)
        _set_system_options(attrs["system"], cwd=cwd, queue=queue, name=name,
                            constraints=constraints, dependencies=dependencies,
                            output=output, error=error)
        doc = {
            "resources": [top],
            "tasks": [{"command": argv, "slot": "task", "count": task_count}],
            "attributes": attrs,
            "version": 1,
        }
        return cls._from_plain(_plain_copy(doc), True, urgency)

    # -- output --------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the jobspec document."""
        return cast(dict[str, Any], orjson.loads(orjson.dumps(self._doc)))

    def dumps(self) -> str:
        """The jobspec as compact JSON text."""
        return orjson.dumps(self._doc).decode("utf-8")

    def __eq__(self, other: object) -> bool:
        """Jobspecs are equal when their documents are."""
        if not isinstance(other, Jobspec):
            return NotImplemented
        return self._doc == other._doc

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """Short description: command and sizes."""
        return (
            f"<Jobspec {self.name!r} nnodes={self.nnodes} nslots={self.nslots} "
            f"ncores={self.ncores} ngpus={self.ngpus}>"
        )

    # -- derived copies --------------------------------------------------------

    def _system(self) -> dict[str, Any]:
        """attributes.system, or an empty dict (not a copy: do not modify)."""
        system = self._doc["attributes"].get("system")
        return system if isinstance(system, dict) else {}

    def _copy_with_system(self, system: dict[str, Any]) -> Jobspec:
        """A new validated jobspec with ``attributes.system`` replaced."""
        doc = self.to_dict()
        if system or "system" in doc["attributes"]:
            doc["attributes"]["system"] = system
        # The submission default travels with the document it was given for.
        return Jobspec._from_plain(_plain_copy(doc), self._v1, self._urgency)

    def with_shape(self, resources: list[dict[str, Any]], count: dict[str, Any]) -> Jobspec:
        """A validated copy with ``resources`` and the task count replaced (the per-resource
        requests of :mod:`fluxes.formats.shellopts`)."""
        doc = self.to_dict()
        doc["resources"] = resources
        doc["tasks"][0]["count"] = count
        return Jobspec._from_plain(_plain_copy(doc), self._v1, self._urgency)

    def with_system_defaults(
        self, duration: float | None = None, queue: str | None = None
    ) -> Jobspec:
        """A copy with ``duration`` set if unset (missing or 0) and ``queue`` if missing."""
        system = cast(dict[str, Any], orjson.loads(orjson.dumps(self._system())))
        if duration is not None and not system.get("duration"):
            system["duration"] = duration
        if queue is not None and "queue" not in system:
            system["queue"] = queue
        return self._copy_with_system(system)

    def add_required_properties(self, props: list[str]) -> Jobspec:
        """A copy whose constraints also require every property in ``props`` (RFC 33).

        The properties are ANDed into ``attributes.system.constraints``; an
        empty list returns an equal copy.
        """
        # here: constraints import the resource set types, which submitting without
        # --requires never needs (start-up time)
        from fluxes.formats import constraints as _constraints

        system = cast(dict[str, Any], orjson.loads(orjson.dumps(self._system())))
        try:
            system_constraints = _constraints.and_properties(system.get("constraints"), props)
        except ValueError as exc:
            raise JobspecError(f"attributes.system.constraints: {exc}") from None
        if system_constraints:
            system["constraints"] = system_constraints
        return self._copy_with_system(system)

    # -- properties --------------------------------------------------------------

    @property
    def version(self) -> int:
        """The jobspec version (1 for V1)."""
        return cast(int, self._doc["version"])

    @property
    def resources(self) -> list[dict[str, Any]]:
        """A copy of the resources list."""
        return cast(list[dict[str, Any]], orjson.loads(orjson.dumps(self._doc["resources"])))

    @property
    def tasks(self) -> list[dict[str, Any]]:
        """A copy of the tasks list."""
        return cast(list[dict[str, Any]], orjson.loads(orjson.dumps(self._doc["tasks"])))

    @property
    def attributes(self) -> dict[str, Any]:
        """A copy of the attributes mapping."""
        return cast(dict[str, Any], orjson.loads(orjson.dumps(self._doc["attributes"])))

    @property
    def nnodes(self) -> int:
        """Minimum number of nodes requested (0 when there is no node vertex)."""
        return self._summary.nnodes

    @property
    def nslots(self) -> int:
        """Minimum number of task slots, multiplied through enclosing counts."""
        return self._summary.nslots

    @property
    def slot_size(self) -> int:
        """Cores per slot (the largest slot's, when slots differ; 0 if none)."""
        return self._summary.slot_size

    @property
    def gpus_per_slot(self) -> int:
        """GPUs per slot (the largest slot's, when slots differ; 0 if none)."""
        return self._summary.gpus_per_slot

    @property
    def ncores(self) -> int:
        """Minimum total number of cores requested."""
        return self._summary.ncores

    @property
    def ngpus(self) -> int:
        """Minimum total number of gpus requested."""
        return self._summary.ngpus

    @property
    def resource_counts(self) -> dict[str, int]:
        """Minimum total count of each resource type, e.g. ``{"node": 1, "core": 16}``.

        Units are ignored (RFC 14 leaves them free-form), so ``memory`` in GB
        adds up as plain numbers.
        """
        return dict(self._summary.counts)

    @property
    def exclusive(self) -> bool:
        """True if some node vertex is exclusive (explicitly, or by being in a slot)."""
        return self._summary.exclusive

    @property
    def duration(self) -> float:
        """Time limit in seconds; 0.0 means unset."""
        return float(self._system().get("duration", 0.0))

    @property
    def queue(self) -> str | None:
        """The requested queue, if any."""
        queue = self._system().get("queue")
        return queue if isinstance(queue, str) else None

    @property
    def bank(self) -> str | None:
        """The bank to charge (``attributes.system.bank``, ``-B``), if any."""
        bank = self._system().get("bank")
        return bank if isinstance(bank, str) and bank else None

    @property
    def project(self) -> str | None:
        """The accounting project (``attributes.system.project``), if any."""
        project = self._system().get("project")
        return project if isinstance(project, str) and project else None

    @property
    def command(self) -> list[str]:
        """The first task's command (a copy)."""
        return list(self._doc["tasks"][0]["command"])

    @property
    def name(self) -> str:
        """attributes.system.job.name, else the basename of the first command word."""
        job = self._system().get("job")
        if isinstance(job, dict) and isinstance(job.get("name"), str):
            return cast(str, job["name"])
        return posixpath.basename(cast(str, self._doc["tasks"][0]["command"][0]))

    @property
    def cwd(self) -> str | None:
        """The working directory, if set."""
        cwd = self._system().get("cwd")
        return cwd if isinstance(cwd, str) else None

    @property
    def environment(self) -> dict[str, str | None] | None:
        """A copy of the job environment (None if not set)."""
        env = self._system().get("environment")
        return dict(env) if isinstance(env, dict) else None

    @property
    def constraints(self) -> dict[str, Any] | None:
        """A copy of the RFC 31 constraints (None if not set)."""
        value = self._system().get("constraints")
        if not isinstance(value, dict):
            return None
        return cast(dict[str, Any], orjson.loads(orjson.dumps(value)))

    @property
    def dependencies(self) -> list[dict[str, Any]]:
        """A copy of the RFC 26 dependencies (empty if none)."""
        value = self._system().get("dependencies")
        if not isinstance(value, list):
            return []
        return cast(list[dict[str, Any]], orjson.loads(orjson.dumps(value)))

    @property
    def urgency(self) -> int | None:
        """The urgency to submit with when the submitter names none (None: not given).

        Set by :meth:`from_command`; it is not part of the document, so
        :meth:`to_dict` and ``==`` ignore it.
        """
        return self._urgency

    @property
    def is_v1(self) -> bool:
        """True if this jobspec was validated with ``v1=True``."""
        return self._v1


def _command_argv(command: Sequence[str]) -> list[str]:
    """``command`` as a list of strings, or JobspecError."""
    if isinstance(command, str) or not isinstance(command, Sequence) or not command:
        raise JobspecError("command: expected a non-empty list of strings")
    argv = list(command)
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise JobspecError(f"command[{i}]: expected a string, got {_kind_name(arg)}")
    return argv


def _gpus_per_slot(ntasks: int, nnodes: int | None, gpus_per_task: int | None,
                   gpus_per_node: int | None) -> int:
    """The gpus in each task slot of ``Jobspec.from_command`` (0 for none)."""
    gpus = 0 if gpus_per_task is None else _positive_int("gpus_per_task", gpus_per_task, 0)
    if gpus_per_node is not None:
        # flux builds the same shape: nnodes x one slot holding the node's gpus
        gpus_per_node = _positive_int("gpus_per_node", gpus_per_node, 0)
        if nnodes is None:
            raise JobspecError("gpus_per_node: needs nnodes")
        if gpus_per_task is not None:
            raise JobspecError("gpus_per_node: cannot be combined with gpus_per_task")
        if ntasks != nnodes:
            raise JobspecError(f"gpus_per_node: runs one task per node, got ntasks "
                               f"{ntasks} for {nnodes} nodes")
        gpus = gpus_per_node
    return gpus


def _task_shape(ntasks: int, nnodes: int | None, cores_per_task: int, gpus: int,
                exclusive: bool) -> tuple[dict[str, Any], dict[str, int]]:
    """The top resource vertex and the task count of ``Jobspec.from_command``."""
    slot_with: list[dict[str, Any]] = [{"type": "core", "count": cores_per_task}]
    if gpus:
        slot_with.append({"type": "gpu", "count": gpus})
    task_count: dict[str, int] = {"per_slot": 1}
    if nnodes is not None:
        nnodes = _positive_int("nnodes", nnodes)
        if nnodes > ntasks:
            raise JobspecError(f"nnodes: {nnodes} nodes is more than ntasks ({ntasks})")
        per_node = -(-ntasks // nnodes)
        if ntasks % nnodes:
            # Uneven spread: some slots stay empty, as in flux.
            task_count = {"total": ntasks}
        node: dict[str, Any] = {"type": "node", "count": nnodes}
        if exclusive:
            node["exclusive"] = True
        node["with"] = [{"type": "slot", "count": per_node, "label": "task", "with": slot_with}]
        top = node
    else:
        if exclusive:
            raise JobspecError("exclusive: needs nnodes (only whole nodes are exclusive)")
        top = {"type": "slot", "count": ntasks, "label": "task", "with": slot_with}
    return top, task_count


def _system_attributes(attributes: Mapping[str, Any] | None, duration: float | str,
                       environment: Mapping[str, str | None] | None) -> dict[str, Any]:
    """``attributes`` deep-merged under a system section holding duration and environment."""
    attrs: dict[str, Any] = {"system": {}}
    if attributes is not None:
        if not isinstance(attributes, Mapping):
            raise JobspecError(f"attributes: expected a mapping, got {_kind_name(attributes)}")
        _merge(attrs, attributes)
        if not isinstance(attrs.get("system"), dict):
            raise JobspecError("attributes.system: expected a mapping")
    system = attrs["system"]

    try:
        seconds = fsd.parse_duration(duration)
    except ValueError as exc:
        raise JobspecError(f"duration: {exc}") from None
    if not math.isfinite(seconds):
        raise JobspecError("duration: must be finite (0 means unlimited)")
    if seconds or "duration" not in system:
        # 0 means unset (RFC 14), so it does not override attributes.
        system["duration"] = seconds
    if environment is not None:
        if not isinstance(environment, Mapping):
            raise JobspecError(
                f"environment: expected a mapping, got {_kind_name(environment)}"
            )
        system["environment"] = dict(environment)
    else:
        system.setdefault("environment", {})
    return attrs


def _set_system_options(system: dict[str, Any], *, cwd: str | None, queue: str | None,
                        name: str | None, constraints: Mapping[str, Any] | None,
                        dependencies: Sequence[Mapping[str, Any] | str] | None,
                        output: str | None, error: str | None) -> None:
    """Set the optional ``Jobspec.from_command`` arguments that were given in ``system``."""
    if cwd is not None:
        system["cwd"] = os.fspath(cwd)
    if queue is not None:
        system["queue"] = queue
    if name is not None:
        _set_tree(system, ["job", "name"], name)
    if constraints is not None:
        system["constraints"] = constraints
    if dependencies is not None:
        if isinstance(dependencies, str | Mapping) or not isinstance(dependencies, Sequence):
            raise JobspecError("dependencies: expected a list of dependencies")
        deps = [parse_dependency(d) if isinstance(d, str) else d for d in dependencies]
        if deps:
            system["dependencies"] = deps
    for stream, path in (("stdout", output), ("stderr", error)):
        if path is not None:
            _set_tree(
                system,
                ["shell", "options", "output", stream],
                {"type": "file", "path": os.fspath(path)},
            )
