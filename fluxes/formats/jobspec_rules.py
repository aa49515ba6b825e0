"""Jobspec validation: our JSON schema plus the RFC rules no schema can express.

:func:`validate` checks a plain JSON-like object (already known to hold only
JSON types, see :mod:`fluxes.formats.jobspec`) against ``schemas/jobspec.schema.json``
and then against the cross-reference rules of RFC 14 (slot labels, per-resource
types, count ranges via :mod:`fluxes.formats.counts`), RFC 26 (job ids of the ``after*``
schemes) and RFC 31 (constraints via :mod:`fluxes.formats.constraints`).  With
``v1=True`` it also checks the restricted shape of RFC 25.  It returns a
:class:`Summary` of the derived totals the scheduler and queue limits need.

Every problem raises :class:`~fluxes.errors.JobspecError` whose one-line
message starts with the place, e.g. ``resources[0].count: max (2) is less
than min (4)``.  Unknown ``attributes.system`` keys only add warnings.

Why one module: the schema check and the RFC 14/25/26/31 rules fill one :class:`Summary`
in one walk and share the helpers that name the place in every message.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.errors import JobspecError
from fluxes.formats import jobid as _jobid
from fluxes.formats.counts import Count
from fluxes.formats.shown import shown

__all__ = [
    "KNOWN_SYSTEM_ATTRIBUTES",
    "SlotInfo",
    "Summary",
    "check_schema",
    "format_path",
    "join_path",
    "validate",
]

#: values of a jobspec are quoted as the JSON they were written in (``null``, ``true``)
_show = functools.partial(shown, as_json=True)

#: ``attributes.system`` keys described by RFC 14 (``files``: RFC 37).  Any
#: other key is kept but reported in ``Jobspec.warnings``.
KNOWN_SYSTEM_ATTRIBUTES: Final = frozenset(
    {
        "duration",
        "preemptible-after",
        "environment",
        "cwd",
        "queue",
        "bank",
        "project",
        "dependencies",
        "constraints",
        "job",
        "shell",
        "files",
    }
)

#: RFC 26 schemes whose ``value`` is an antecedent job id.
_JOBID_SCHEMES: Final = frozenset({"after", "afterany", "afterok", "afternotok"})

#: RFC 25: the only resource types of a V1 jobspec.
_V1_TYPES: Final = ("node", "slot", "core", "gpu")
_V1_VERTEX_KEYS: Final = frozenset({"type", "count", "unit", "with", "label"})

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


@functools.cache
def schema() -> dict[str, Any]:
    """Our jobspec schema (JSON Schema draft 2020-12), as a dict (read once)."""
    from importlib import resources as _resources

    schema_file = _resources.files("fluxes.formats").joinpath("schemas/jobspec.schema.json")
    text = schema_file.read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


def _is_integer(checker: object, instance: object) -> bool:
    """JSON Schema "integer", but 4.0 is a float, not an integer, in a jobspec."""
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def validator() -> Any:
    """The jsonschema validator of :func:`schema`, built on first use: jsonschema is
    imported only for documents the fast path does not accept (the command line
    that builds a valid jobspec never needs it), and creating a validator resolves
    references, which is the slow part."""
    import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
    import jsonschema.validators  # type: ignore[import-untyped]

    draft = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer",
                                                                          _is_integer),
    )
    draft.check_schema(schema())
    return draft(schema())


# -- messages ---------------------------------------------------------------------


# A deep path in a message keeps this many pieces (``.key`` or ``[i]``) at
# each end around "...": thirty levels of ``.with[0]`` would fill the screen.
_PATH_HEAD = 4
_PATH_TAIL = 7


def join_path(pieces: Sequence[str]) -> str:
    """Join path pieces (``"resources"``, ``"[0]"``, ``".with"``...) into one string.

    A path of more than a dozen pieces keeps the first and last few with
    ``...`` between (``resources[0].with[0]...with[0].with[0].count``), so
    the message stays one readable line and still ends at the exact place.
    """
    if len(pieces) <= _PATH_HEAD + _PATH_TAIL + 1:
        return "".join(pieces)
    start = len(pieces) - _PATH_TAIL
    if pieces[start].startswith("["):
        start -= 1  # keep an index with its key: "...with[0]", not "...[0]"
    return "".join(pieces[:_PATH_HEAD]) + "..." + "".join(pieces[start:]).removeprefix(".")


def format_path(parts: Iterator[str | int] | list[str | int] | tuple[str | int, ...]) -> str:
    """``["resources", 0, "with", 1]`` -> ``"resources[0].with[1]"``.

    Keys that are not plain words are JSON-quoted (``job["a.b"]``); very
    long keys and very deep paths are shortened (see :func:`join_path`) so
    that a message stays one readable line.
    """
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
            continue
        key = part if len(part) <= 40 else part[:37] + "..."
        if _PLAIN_KEY.fullmatch(key):
            out.append(f".{key}" if out else key)
        else:
            quoted = json.dumps(key, ensure_ascii=False)
            if not quoted.isprintable():
                # JSON leaves U+2028, U+0085, lone surrogates... raw; they would
                # break the message line (or its encoding), so escape them too.
                quoted = "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in quoted)
            out.append(f"[{quoted}]")
    return join_path(out) or "jobspec"


_TYPE_NAMES: Final = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "null": "null",
}


def _kind(value: object) -> str:
    """The JSON kind of ``value`` for "got ..." message parts."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _schema_message(error: Any) -> str:
    """Turn one jsonschema error into our ``place: problem`` line."""
    path = list(error.absolute_path)
    kw = str(error.validator)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    custom = schema.get("x-messages", {}).get(kw)
    inst = error.instance
    if custom is not None:
        if kw == "pattern":
            return f"{format_path(path)}: {custom} (got {_show(inst)})"
        return f"{format_path(path)}: {custom}"
    if kw == "type":
        expected = schema.get("x-expected")
        if expected is None:
            types = error.validator_value
            names = [types] if isinstance(types, str) else list(types)
            expected = " or ".join(_TYPE_NAMES.get(t, t) for t in names)
        return f"{format_path(path)}: expected {expected}, got {_kind(inst)}"
    if kw == "required" and isinstance(inst, dict):
        missing = [k for k in error.validator_value if k not in inst]
        name = missing[0] if missing else "?"
        return f"{format_path(path)}: missing required key {_show(name)}"
    if kw == "additionalProperties" and isinstance(inst, dict):
        allowed = schema.get("properties", {})
        extra = [k for k in inst if k not in allowed]
        name = extra[0] if extra else "?"
        known = ", ".join(allowed) if allowed else "none"
        return f"{format_path(path)}: unknown key {_show(name)} (expected one of: {known})"
    if kw == "minItems":
        if error.validator_value == 1:
            return f"{format_path(path)}: must not be empty"
        return f"{format_path(path)}: expected at least {error.validator_value} items"
    if kw == "maxItems":
        return f"{format_path(path)}: expected at most {error.validator_value} items"
    if kw == "minLength":
        return f"{format_path(path)}: must not be empty"
    if kw == "minimum":
        return f"{format_path(path)}: must be >= {error.validator_value}, got {_show(inst)}"
    if kw in ("enum", "const"):
        options = error.validator_value if kw == "enum" else [error.validator_value]
        shown = ", ".join(_show(o) for o in options)
        return f"{format_path(path)}: must be one of {shown}, got {_show(inst)}"
    if kw == "uniqueItems":
        return f"{format_path(path)}: contains duplicate entries"
    # Fallback for keywords without a tailored wording: jsonschema's own text,
    # forced onto one line and shortened (it may embed the whole instance).
    text = " ".join(error.message.split())
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{format_path(path)}: {text}"


# -- fast path ----------------------------------------------------------------------
#
# jsonschema walks every value through several Python calls (about 1 ms for a
# small jobspec, more with a real environment), too slow to validate thousands
# of jobspecs a second.  These functions accept only documents that certainly
# satisfy the schema; anything they do not accept goes to jsonschema, which
# stays the authority and words the message.  Being stricter here only costs
# speed; being looser would be a bug (tests/unit/test_jobspec.py compares the
# two on generated documents).

_VERTEX_KEYS: Final = frozenset({"type", "count", "unit", "exclusive", "with", "label", "id"})
_TASK_KEYS: Final = frozenset({"command", "slot", "count", "distribution", "attributes"})
_COUNT_KEYS: Final = frozenset({"min", "max", "operand", "operator"})
_TOP_KEYS: Final = frozenset({"version", "resources", "tasks", "attributes"})


def _pos_int(value: object) -> bool:
    """An int (not bool) >= 1."""
    return type(value) is int and value >= 1


def _nonempty_str(value: object) -> bool:
    """A str of length >= 1."""
    return type(value) is str and len(value) > 0


def _number_ge0(value: object) -> bool:
    """An int or float (not bool) >= 0."""
    return type(value) in (int, float) and value >= 0  # type: ignore[operator]


#: Vertex types whose integer count must be at least 1; any other type may
#: ask for 0 (flux-core's validator agrees: ``gpu: 0`` is a valid request).
_POSITIVE_TYPES: Final = ("node", "slot", "core")


def _fast_count(count: object, zero_ok: bool = False) -> bool:
    """A schema-valid resource count (an integer 0 only if ``zero_ok``)."""
    if type(count) is int:
        return count >= (0 if zero_ok else 1)
    if type(count) is str:
        return len(count) > 0
    if type(count) is not dict or "min" not in count or not count.keys() <= _COUNT_KEYS:
        return False
    for key in ("min", "max", "operand"):
        if key in count and not _pos_int(count[key]):
            return False
    return "operator" not in count or count["operator"] in ("+", "*", "^")


def _fast_vertices(vertices: object) -> bool:
    """A schema-valid list of resource vertices (nesting is bounded by the loader)."""
    if type(vertices) is not list:
        return False
    for v in vertices:
        if type(v) is not dict or not v.keys() <= _VERTEX_KEYS:
            return False
        kind = v.get("type")
        if not _nonempty_str(kind) or "count" not in v:
            return False
        if not _fast_count(v["count"], zero_ok=kind not in _POSITIVE_TYPES):
            return False
        if "unit" in v and type(v["unit"]) is not str:
            return False
        if "id" in v and type(v["id"]) is not str:
            return False
        if "exclusive" in v and type(v["exclusive"]) is not bool:
            return False
        if "label" in v and not _nonempty_str(v["label"]):
            return False
        if "with" in v and not _fast_vertices(v["with"]):
            return False
        if kind == "slot" and ("label" not in v or not v.get("with")):
            return False
    return True


def _fast_env(env: object) -> bool:
    """A schema-valid environment mapping."""
    if type(env) is not dict:
        return False
    for key, value in env.items():
        if not key or "=" in key or (value is not None and type(value) is not str):
            return False
    return True


def _fast_task(task: object) -> bool:
    """A schema-valid task."""
    if type(task) is not dict or not task.keys() <= _TASK_KEYS:
        return False
    command = task.get("command")
    if type(command) is not list or not command:
        return False
    if any(type(arg) is not str for arg in command):
        return False
    if not _nonempty_str(task.get("slot")):
        return False
    count = task.get("count")
    if type(count) is not dict or len(count) != 1:
        return False
    ((key, value),) = count.items()
    if key in ("per_slot", "total"):
        if not _pos_int(value):
            return False
    elif key == "per_resource":
        if type(value) is not dict or value.keys() != {"type", "count"}:
            return False
        if not _nonempty_str(value["type"]) or not _pos_int(value["count"]):
            return False
    else:
        return False
    if "distribution" in task and type(task["distribution"]) is not str:
        return False
    if "attributes" in task:
        attrs = task["attributes"]
        if type(attrs) is not dict:
            return False
        if "environment" in attrs and not _fast_env(attrs["environment"]):
            return False
    return True


def _fast_dependencies(deps: object) -> bool:
    """A schema-valid RFC 26 dependency list."""
    if type(deps) is not list or not deps:
        return False
    for i, dep in enumerate(deps):
        if type(dep) is not dict:
            return False
        if not _nonempty_str(dep.get("scheme")) or not _nonempty_str(dep.get("value")):
            return False
        if "type" in dep and dep["type"] not in ("in", "out", "inout"):
            return False
        if "scope" in dep and dep["scope"] not in ("user", "global"):
            return False
        if dep["scheme"] in ("string", "fluid") and ("type" not in dep or "scope" not in dep):
            return False
        if dep in deps[:i]:
            # Possible duplicate (Python equality is looser than JSON's):
            # let jsonschema decide.
            return False
    return True


def _fast_system(system: object) -> bool:
    """A schema-valid attributes.system mapping."""
    if type(system) is not dict:
        return False
    for key, value in system.items():
        if key in ("duration", "preemptible-after"):
            ok = _number_ge0(value)
        elif key == "environment":
            ok = _fast_env(value)
        elif key == "cwd":
            ok = type(value) is str and value.startswith("/")
        elif key == "queue":
            ok = _nonempty_str(value)
        elif key in ("bank", "project"):
            ok = type(value) is str
        elif key == "dependencies":
            ok = _fast_dependencies(value)
        elif key in ("constraints", "files"):
            ok = type(value) is dict
        elif key == "job":
            ok = type(value) is dict and all(type(v) is str for v in value.values())
        elif key == "shell":
            ok = type(value) is dict and ("options" not in value or type(value["options"]) is dict)
        else:
            ok = True
        if not ok:
            return False
    return True


def _fast_ok(obj: object) -> bool:
    """True only if ``obj`` certainly satisfies the schema."""
    if type(obj) is not dict or obj.keys() != _TOP_KEYS:
        return False
    if not _pos_int(obj["version"]):
        return False
    resources, tasks, attrs = obj["resources"], obj["tasks"], obj["attributes"]
    if type(resources) is not list or not resources or not _fast_vertices(resources):
        return False
    if type(tasks) is not list or not tasks or not all(_fast_task(t) for t in tasks):
        return False
    if type(attrs) is not dict or not attrs.keys() <= {"user", "system"}:
        return False
    if "user" in attrs and type(attrs["user"]) is not dict:
        return False
    return "system" not in attrs or _fast_system(attrs["system"])


def check_schema(obj: object, fast: bool = True) -> None:
    """Raise JobspecError for the shallowest violation of the schema in ``obj``.

    With ``fast`` (the default) documents accepted by the hand-written fast
    path skip jsonschema; ``fast=False`` always runs jsonschema.
    """
    if fast and _fast_ok(obj):
        return
    best: Any = None  # a jsonschema ValidationError
    for error in validator().iter_errors(obj):
        # Shallowest first: a missing top-level key explains more than a
        # detail inside it; ties keep jsonschema's (schema-ordered) sequence.
        if best is None or len(error.absolute_path) < len(best.absolute_path):
            best = error
            if not best.absolute_path:
                break
    if best is not None:
        raise JobspecError(_schema_message(best))


# -- resource walk ----------------------------------------------------------------


@dataclass
class SlotInfo:
    """What one slot vertex (identified by its label) holds.

    ``count`` is the minimum number of such slots in the whole request (the
    slot's own count multiplied by those of enclosing vertices); ``cores`` and
    ``gpus`` are the minimum per slot; ``types`` are the resource types
    declared inside the slot (for ``per_resource``).  A slot that holds
    another slot further down (``slot > node > slot``) counts what that inner
    slot holds too.
    """

    label: str
    path: str
    count: int = 0
    cores: int = 0
    gpus: int = 0
    types: set[str] = field(default_factory=set)


@dataclass
class Summary:
    """Derived totals of a valid jobspec; minimum counts multiplied through."""

    nnodes: int = 0
    nslots: int = 0
    ncores: int = 0
    ngpus: int = 0
    exclusive: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    slots: dict[str, SlotInfo] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def slot_size(self) -> int:
        """Cores per slot (of the largest slot when there are several kinds)."""
        return max((s.cores for s in self.slots.values()), default=0)

    @property
    def gpus_per_slot(self) -> int:
        """GPUs per slot (of the largest slot when there are several kinds)."""
        return max((s.gpus for s in self.slots.values()), default=0)


def _decode_count(value: object, where: str | tuple[str, ...]) -> Count:
    """Count.decode with the place (a string, or pieces for :func:`join_path`)
    prefixed to its message.

    RFC 14 (current text and schema) wants ``max``, ``operator`` and
    ``operand`` together or not at all; fluxes.formats.counts is more lenient for
    other callers, so the jobspec rule is enforced here.
    """
    if isinstance(value, dict):
        present = [k for k in ("max", "operator", "operand") if k in value]
        if present and len(present) != 3:
            missing = ", ".join(k for k in ("max", "operator", "operand") if k not in value)
            raise JobspecError(f"{_place(where)}: max, operator and operand must be given "
                               f"together (missing {missing})")
    try:
        return Count.decode(value)
    except ValueError as exc:
        raise JobspecError(f"{_place(where)}: {exc}") from None


def _place(where: str | tuple[str, ...]) -> str:
    """A message's place from a string or path pieces (joined only when needed)."""
    return where if isinstance(where, str) else join_path(where)


def _vertex_count(raw: object, here: tuple[str, ...]) -> int:
    """The minimum count of the vertex at ``here``."""
    if type(raw) is int and raw == 0:
        # Only types outside _POSITIVE_TYPES get here (the schema
        # refuses 0 for the others): "none of these", e.g. gpu: 0.
        return 0
    return _decode_count(raw, (*here, ".count")).min


class _Walker:
    """Depth-first walk over the resource graph that checks and totals it."""

    def __init__(self) -> None:
        self.summary = Summary()
        self.labels: dict[str, str] = {}
        # Labels of slots that hold another slot deeper down (not task slots).
        self.outer_slots: set[str] = set()

    def walk(
        self,
        vertices: list[dict[str, Any]],
        path: tuple[str, ...],
        mult: int,
        slots: tuple[tuple[SlotInfo, int], ...],
        parent: str | None,
        in_node: bool,
    ) -> None:
        """Visit ``vertices`` found at ``path`` (pieces for :func:`join_path`).

        ``mult`` is the product of the enclosing minimum counts.  ``slots``
        are the enclosing slots, innermost last, each with the product of the
        counts from that slot down to here; ``parent`` is the type of the
        vertex that holds ``vertices`` (None at the top).
        """
        s = self.summary
        for i, vertex in enumerate(vertices):
            # Pieces, joined only for a message: a deep path is shortened then.
            here = (*path, f"[{i}]")
            kind = vertex["type"]
            count = _vertex_count(vertex["count"], here)
            total = mult * count
            s.counts[kind] = s.counts.get(kind, 0) + total
            label = vertex.get("label")
            if label is not None:
                self._add_label(label, here)
            inner = tuple((info, rel * count) for info, rel in slots)
            if kind == "slot":
                if parent == "slot":
                    # flux-core accepts a slot deeper inside another slot
                    # (RFC 14 / flux-core use case 1.10: slot > node > slot),
                    # but one directly inside another groups nothing.
                    raise JobspecError(
                        f"{join_path(here)}: a slot cannot be directly inside another slot "
                        f"({slots[-1][0].path}); put a resource such as a node between them"
                    )
                for info, _ in slots:
                    self.outer_slots.add(info.label)
                new_slot = SlotInfo(label=str(label), path=join_path(here), count=total)
                s.slots[new_slot.label] = new_slot
                inner = (*inner, (new_slot, 1))
            else:
                for info, rel in slots:
                    info.types.add(kind)
                    if kind == "core":
                        info.cores += rel * count
                    elif kind == "gpu":
                        info.gpus += rel * count
            if kind == "node":
                if not in_node:
                    s.nnodes += total
                # RFC 14: resources in a slot default to exclusive.
                if vertex.get("exclusive", bool(slots)):
                    s.exclusive = True
            elif kind == "core":
                s.ncores += total
            elif kind == "gpu":
                s.ngpus += total
            children = vertex.get("with")
            if children:
                self.walk(
                    children,
                    (*here, ".with"),
                    total,
                    inner,
                    kind,
                    in_node or kind == "node",
                )

    def _add_label(self, label: str, here: tuple[str, ...]) -> None:
        """Note that the vertex at ``here`` carries ``label``; labels are unique."""
        if label in self.labels:
            raise JobspecError(
                f"{join_path((*here, '.label'))}: duplicate label {_show(label)} "
                f"(first used at {self.labels[label]})"
            )
        self.labels[label] = join_path(here)

    def finish(self) -> Summary:
        """The summary; ``nslots`` counts task slots (slots holding no other slot)."""
        s = self.summary
        s.nslots = sum(
            info.count for label, info in s.slots.items() if label not in self.outer_slots
        )
        return s


def _check_tasks(obj: Mapping[str, Any], summary: Summary, labels: dict[str, str],
                 outer: set[str]) -> None:
    """Each task names a slot and counts tasks per slot, per resource or in total.

    A slot in ``outer`` holds other slots; it is not expected to run tasks itself.
    """
    used: set[str] = set()
    for i, task in enumerate(obj["tasks"]):
        here = f"tasks[{i}]"
        name = task["slot"]
        slot = summary.slots.get(name)
        if slot is None:
            if name in labels:
                raise JobspecError(
                    f"{here}.slot: {_show(name)} labels a non-slot vertex ({labels[name]})"
                )
            known = ", ".join(_show(k) for k in summary.slots) or "none"
            raise JobspecError(f"{here}.slot: no slot is labelled {_show(name)} (slots: {known})")
        used.add(name)
        count = task["count"]
        for key in ("per_slot", "total"):
            if key in count:
                _decode_count(count[key], f"{here}.count.{key}")
        per_resource = count.get("per_resource")
        if per_resource is not None:
            _decode_count(per_resource["count"], f"{here}.count.per_resource.count")
            if per_resource["type"] not in slot.types:
                declared = ", ".join(sorted(slot.types)) or "none"
                raise JobspecError(
                    f"{here}.count.per_resource.type: {_show(per_resource['type'])} is not "
                    f"declared inside slot {_show(name)} (declared: {declared})"
                )
    for label, slot in summary.slots.items():
        if label not in used and label not in outer:
            summary.warnings.append(f"{slot.path}: slot {_show(label)} is not used by any task")


def _check_system(system: Mapping[str, Any], summary: Summary) -> None:
    """Rules for reserved system attributes beyond their shape."""
    deps = system.get("dependencies")
    if deps is not None:
        for i, dep in enumerate(deps):
            if dep["scheme"] in _JOBID_SCHEMES:
                try:
                    _jobid.parse(dep["value"])
                except ValueError as exc:
                    raise JobspecError(
                        f"attributes.system.dependencies[{i}].value: {exc}"
                    ) from None
    if "constraints" in system:
        from fluxes.formats import constraints as _constraints  # only when there are some

        try:
            _constraints.parse(system["constraints"])
        except ValueError as exc:
            text = str(exc)
            # constraints.parse names places "constraint.and[0]..."; re-root them.
            text = text[len("constraint") :] if text.startswith("constraint") else ": " + text
            raise JobspecError(f"attributes.system.constraints{text}") from None
    for key in system:
        if key not in KNOWN_SYSTEM_ATTRIBUTES:
            summary.warnings.append(
                f"{format_path(['attributes', 'system', key])}: unknown system attribute "
                "(kept, not interpreted)"
            )


# -- RFC 25 -----------------------------------------------------------------------


def _check_v1_vertex(vertex: Mapping[str, Any], here: str, parent: str | None) -> None:
    """One vertex of the four V1 graphs: slot>core[,gpu] optionally under a node."""
    kind = vertex["type"]
    if kind not in _V1_TYPES:
        raise JobspecError(
            f"{here}.type: V1 allows only node, slot, core and gpu, got {_show(kind)}"
        )
    allowed = _V1_VERTEX_KEYS | {"exclusive"} if kind == "node" else _V1_VERTEX_KEYS
    for key in vertex:
        if key not in allowed:
            raise JobspecError(f"{here}: V1 does not allow key {_show(key)} on a {kind} vertex")
    count = vertex["count"]
    if not isinstance(count, int) or isinstance(count, bool):
        raise JobspecError(f"{here}.count: V1 requires an integer count, got {_show(count)}")
    children = vertex.get("with") or []
    if parent is None and kind not in ("node", "slot"):
        raise JobspecError(f"{here}.type: a V1 jobspec must start with node or slot")
    for i, child in enumerate(children):
        if child["type"] not in _V1_TYPES:
            raise JobspecError(
                f"{here}.with[{i}].type: V1 allows only node, slot, core and gpu, "
                f"got {_show(child['type'])}"
            )
    if kind == "node":
        if len(children) != 1 or children[0]["type"] != "slot":
            raise JobspecError(f"{here}.with: a V1 node must contain exactly one slot")
    elif kind == "slot":
        kinds = [c["type"] for c in children]
        if kinds.count("core") != 1 or kinds.count("gpu") > 1 or len(kinds) != 1 + kinds.count(
            "gpu"
        ):
            raise JobspecError(
                f"{here}.with: a V1 slot must contain one core and at most one gpu, "
                f"got {_show(kinds)}"
            )
    elif children:
        raise JobspecError(f"{here}.with: a V1 {kind} vertex cannot contain other resources")
    for i, child in enumerate(children):
        _check_v1_vertex(child, f"{here}.with[{i}]", kind)


def _check_v1(obj: Mapping[str, Any], summary: Summary) -> None:
    """RFC 25: the restricted shape of a version 1 jobspec."""
    if obj["version"] != 1:
        raise JobspecError(
            f"version: a V1 jobspec must have version 1, got {_show(obj['version'])}"
        )
    resources = obj["resources"]
    if len(resources) != 1:
        raise JobspecError(
            f"resources: a V1 jobspec has exactly one top-level resource, got {len(resources)}"
        )
    _check_v1_vertex(resources[0], "resources[0]", None)
    tasks = obj["tasks"]
    if len(tasks) != 1:
        raise JobspecError(f"tasks: a V1 jobspec has exactly one task, got {len(tasks)}")
    count = tasks[0]["count"]
    if "per_resource" in count:
        raise JobspecError("tasks[0].count: V1 does not support per_resource")
    if "per_slot" in count and count["per_slot"] != 1:
        raise JobspecError(f"tasks[0].count.per_slot: must be 1 in V1, got {count['per_slot']}")
    if "total" in count and count["total"] < summary.nnodes:
        raise JobspecError(
            f"tasks[0].count.total: must be at least the node count ({summary.nnodes}) in V1, "
            f"got {count['total']}"
        )
    system = obj["attributes"].get("system")
    if system is None:
        raise JobspecError("attributes: V1 requires attributes.system")
    if "duration" not in system:
        raise JobspecError("attributes.system: V1 requires duration")


# -- entry point --------------------------------------------------------------------


def validate(obj: Any, v1: bool = False) -> Summary:
    """Check ``obj`` (JSON types only) as a canonical jobspec; return its totals.

    With ``v1=True`` also check RFC 25.  Raises JobspecError naming the place.
    """
    check_schema(obj)
    walker = _Walker()
    walker.walk(obj["resources"], ("resources",), 1, (), None, False)
    summary = walker.finish()
    _check_tasks(obj, summary, walker.labels, walker.outer_slots)
    system = obj["attributes"].get("system")
    if system is not None:
        _check_system(system, summary)
    if v1:
        _check_v1(obj, summary)
    return summary
