"""The bounded YAML reader of jobspecs (:meth:`fluxes.formats.jobspec.Jobspec.from_yaml`).

Apart from :mod:`fluxes.formats.jobspec` so that building a jobspec from a command
line (``fluxes submit``) does not import PyYAML: only YAML text needs it.
"""

from __future__ import annotations

import math
from typing import Any, Final

import yaml
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from fluxes.errors import JobspecError
from fluxes.formats import yamlguard
from fluxes.formats.jobspec import _INT_MAX, _INT_MIN, MAX_DEPTH, MAX_NODES, _kind_name, _short
from fluxes.formats.jobspec_rules import format_path

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_TAG = "tag:yaml.org,2002:"
# Scalars reuse PyYAML's own YAML 1.1 conversions so that we read exactly
# what yaml.safe_load reads; tags outside this table are not JSON types.
_SCALAR_TAGS: Final = {
    _TAG + "str": "construct_yaml_str",
    _TAG + "int": "construct_yaml_int",
    _TAG + "float": "construct_yaml_float",
    _TAG + "bool": "construct_yaml_bool",
    _TAG + "null": "construct_yaml_null",
}
_STR_TAG: Final = _TAG + "str"
_RESOLVER: Final = Resolver()
_CONSTRUCTOR: Final = SafeConstructor()
# Event classes compared by identity in the hot loop of load_yaml.
_ScalarEvent: Final = yaml.ScalarEvent
_MappingStartEvent: Final = yaml.MappingStartEvent
_SequenceStartEvent: Final = yaml.SequenceStartEvent
_MappingEndEvent: Final = yaml.MappingEndEvent
_SequenceEndEvent: Final = yaml.SequenceEndEvent
_AliasEvent: Final = yaml.AliasEvent
_DocumentStartEvent: Final = yaml.DocumentStartEvent


# -- YAML -------------------------------------------------------------------------


def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:binary`` -> ``!!binary`` for messages."""
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag


def _yaml_error(exc: yaml.YAMLError) -> JobspecError:
    """One-line JobspecError for a PyYAML parse error."""
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    text = " ".join(str(problem).split())
    return JobspecError(f"invalid YAML{where}: {text}")


def _where(event: yaml.Event) -> str:
    """``line L, column C`` of an event, for messages about the YAML text."""
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def _scalar(event: yaml.ScalarEvent) -> Any:
    """The JSON value of a scalar event; JobspecError for tags that are not JSON types."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = _RESOLVER.resolve(  # type: ignore[no-untyped-call]
            yaml.ScalarNode, event.value, event.implicit
        )
    if tag == _STR_TAG:
        return event.value
    if tag == _TAG + "value":
        # A lone "=" resolves to YAML 1.1's !!value, which safe_load cannot
        # construct; in a command line it can only mean the string.
        return event.value
    method = _SCALAR_TAGS.get(tag)
    if method is None:
        if tag == _TAG + "merge":
            raise JobspecError(f"YAML {_where(event)}: merge keys (<<) are not supported")
        if tag == _TAG + "timestamp":
            raise JobspecError(
                f"YAML {_where(event)}: {event.value!r} reads as a date; quote it to make a string"
            )
        raise JobspecError(
            f"YAML {_where(event)}: tag {_short_tag(tag)} is not allowed "
            "(jobspec values are JSON types)"
        )
    node = yaml.ScalarNode(tag, event.value)
    value = getattr(_CONSTRUCTOR, method)(node)
    if isinstance(value, float) and not math.isfinite(value):
        raise JobspecError(f"YAML {_where(event)}: {event.value!r} is not a finite number")
    if isinstance(value, int) and not _INT_MIN <= value <= _INT_MAX:
        raise JobspecError(f"YAML {_where(event)}: integer out of range")
    return value


def load_yaml(text: str) -> Any:  # noqa: C901 -- one YAML event loop: splitting it scatters its state
    """Build the single YAML document in ``text`` from the event stream.

    Building from events (rather than composing nodes first) lets us stop at
    the first level past MAX_DEPTH or node past MAX_NODES: libyaml composes
    nested input recursively in C and would crash on a few hundred thousand
    levels, and takes quadratic time long before that.
    """
    # Our limits first, whatever the YAML library: its own (libyaml's nesting
    # limit) may stop the text with another message before the first event.
    found = yamlguard.scan(text, MAX_DEPTH)
    if found.depth > MAX_DEPTH:
        raise JobspecError(f"jobspec is nested more than {MAX_DEPTH} levels deep")
    if found.alias is not None:
        line, column, name = found.alias
        raise JobspecError(
            f"YAML line {line}, column {column}: aliases (*{name}) are not allowed in a jobspec"
        )
    stack: list[tuple[dict[str, Any] | list[Any], list[str | int]]] = []
    keys: list[str | None] = []
    result: Any = None
    documents = 0
    nodes = 0

    def add(value: Any, event: yaml.Event) -> None:
        nonlocal result
        if not stack:
            result = value
            return
        container, path = stack[-1]
        if isinstance(container, list):
            container.append(value)
            return
        key = keys[-1]
        if key is None:
            if not isinstance(value, str):
                if isinstance(value, dict | list):
                    shown = "a mapping or list"
                else:
                    shown = f"{getattr(event, 'value', value)!r} ({_kind_name(value)})"
                raise JobspecError(
                    f"{format_path(path)}: mapping key {shown} at YAML {_where(event)} "
                    "is not a string (quote it)"
                )
            if value in container:
                raise JobspecError(
                    f"{format_path(path)}: duplicate key {_short(value)} at YAML {_where(event)}"
                )
            keys[-1] = value
            return
        container[key] = value
        keys[-1] = None

    def child_path() -> list[str | int]:
        if not stack:
            return []
        container, path = stack[-1]
        if isinstance(container, list):
            return [*path, len(container)]
        key = keys[-1]
        return [*path, key if key is not None else "?"]

    try:
        event: Any  # narrowed by the class checks below, which mypy cannot follow
        for event in yaml.parse(text, Loader=_Loader):
            kind = type(event)
            if kind is _ScalarEvent:
                nodes += 1
                if nodes > MAX_NODES:
                    raise JobspecError(f"jobspec has more than {MAX_NODES} values")
                if event.tag is None and event.implicit[1] and not event.implicit[0]:
                    add(event.value, event)  # quoted: always a string
                else:
                    add(_scalar(event), event)
            elif kind is _MappingStartEvent or kind is _SequenceStartEvent:
                nodes += 1
                if nodes > MAX_NODES:
                    raise JobspecError(f"jobspec has more than {MAX_NODES} values")
                is_map = kind is _MappingStartEvent
                tag = event.tag
                if tag is not None and tag != "!" and tag != _TAG + ("map" if is_map else "seq"):
                    raise JobspecError(
                        f"YAML {_where(event)}: tag {_short_tag(tag)} is not allowed "
                        "(jobspec values are JSON types)"
                    )
                if len(stack) >= MAX_DEPTH:
                    raise JobspecError(f"jobspec is nested more than {MAX_DEPTH} levels deep")
                path = child_path()
                container: dict[str, Any] | list[Any] = {} if is_map else []
                add(container, event)
                stack.append((container, path))
                keys.append(None)
            elif kind is _MappingEndEvent or kind is _SequenceEndEvent:
                stack.pop()
                keys.pop()
            elif kind is _AliasEvent:
                raise JobspecError(
                    f"YAML {_where(event)}: aliases (*{event.anchor}) are not allowed in a jobspec"
                )
            elif kind is _DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise JobspecError(
                        f"YAML {_where(event)}: a jobspec is a single YAML document, found more"
                    )
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError) as exc:
        if isinstance(exc, JobspecError):
            raise
        # PyYAML scalar conversions can fail on odd input (e.g. a huge
        # sexagesimal number); report it like any other bad YAML.
        raise JobspecError(f"invalid YAML: {' '.join(str(exc).split())[:120]}") from None
    return result
