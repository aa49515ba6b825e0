"""RFC 33 job queues: configuration, submission policy and queue state.

Three parts, all pure (the workers that call them own the I/O):

* :class:`QueueConfig` reads the ``[policy]`` and ``[queues]`` tables of the
  instance configuration (TOML) and checks every key, raising
  :class:`~fluxes.errors.ConfigError` with the key's full path.
* :meth:`QueueConfig.admit` decides whether a submitted jobspec may enter its
  queue (queue name, enabled state, access, size and duration limits) and
  returns the jobspec with the queue's defaults and ``requires`` applied, or
  raises :class:`~fluxes.errors.PolicyError` with one line saying why not.
* :class:`QueueEvent`, :class:`QueueState` and :func:`apply_queue_event` are
  the pure fold behind the administrative enable/disable/start/stop state,
  which is event-sourced elsewhere.

See ``docs/queues.md``.

Why one module: the admin-state fold (the third part) could stand alone, but its initial
states and checks come from :class:`QueueConfig` and admission reads its states, so
apart the two modules would import each other.
"""

from __future__ import annotations

import datetime
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.errors import ConfigError, PolicyError
from fluxes.formats.fsd import format_duration, parse_duration
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import check_property_name
from fluxes.formats.shown import shown as _show

__all__ = [
    "PLACEMENTS",
    "QUEUE_EVENT_KINDS",
    "SCHEDULER_POLICIES",
    "UNLIMITED",
    "Admission",
    "JobSize",
    "Policy",
    "QueueConfig",
    "QueueEvent",
    "QueueState",
    "SchedulerPolicy",
    "apply_queue_event",
    "initial_states",
]

#: Job size limit meaning "no limit" (0 is a real limit, as in flux).
UNLIMITED: Final = -1

#: Values of ``policy.scheduler.policy``.
SCHEDULER_POLICIES: Final = ("fcfs", "easy", "conservative")

#: Values of ``policy.scheduler.placement``.
# Kept equal to fluxes.domain.sched.placement.POLICIES (the scheduler being written alongside).
PLACEMENTS: Final = ("first-fit", "best-fit", "worst-fit", "lonode", "hinode")

#: Kinds of :class:`QueueEvent`.
QUEUE_EVENT_KINDS: Final = ("enable", "disable", "start", "stop")

# Queue names become parts of dotted config keys, CLI arguments and store
# keys, so they are kept to a safe alphabet (no dots, no spaces).
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")

_Path = tuple[str, ...]

# The leaves of a policy table: path inside the table -> kind of value.
_SIZE_KEYS: Final = ("nnodes", "ncores", "ngpus")
_LEAVES: Final[dict[_Path, str]] = {
    ("jobspec", "defaults", "system", "duration"): "default-duration",
    ("jobspec", "defaults", "system", "queue"): "queue-name",
    ("limits", "duration"): "limit-duration",
    **{("limits", "job-size", bound, key): "size"
       for bound in ("max", "min") for key in _SIZE_KEYS},
    ("access", "allow-user"): "names",
    ("access", "allow-group"): "names",
    ("scheduler", "policy"): "sched-policy",
    ("scheduler", "queue-depth"): "positive",
    ("scheduler", "reservation-depth"): "non-negative",
    ("scheduler", "placement"): "placement",
}
# Every proper prefix of a leaf path is a table.
_TABLES: Final[frozenset[_Path]] = frozenset(
    path[:i] for path in _LEAVES for i in range(len(path))
)

_DEFAULT_QUEUE: Final = ("jobspec", "defaults", "system", "queue")
_QUEUE_KEYS: Final = ("requires", "policy")


def _kind(value: object) -> str:
    """How a TOML value is named in error messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, datetime.date | datetime.time):
        return "a date/time"
    return type(value).__name__


def format_key(name: object) -> str:
    """One component of a config key for a message: as written, or quoted if odd.

    A quoted TOML key may hold anything, newlines included; printing such a
    key raw would break the one-line error message.
    """
    text = str(name)
    return text if text.isprintable() and len(text) <= 40 else _show(text)


def _key(where: str, path: _Path) -> str:
    return ".".join((where, *map(format_key, path))) if path else where


def _check_queue_name(name: object, where: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: invalid queue name {_show(name)} (use 1-64 letters, digits, '_' or '-')"
        )
    return name


# -- policy tables --------------------------------------------------------------------


def _check_leaf(kind: str, value: Any, key: str) -> Any:
    """Validate one policy value; return its normal form."""
    if kind in ("default-duration", "limit-duration"):
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a duration string or number, got {_kind(value)}")
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"{key}: {exc}") from None
        if kind == "default-duration" and math.isinf(seconds):
            raise ConfigError(f"{key}: a default duration must be finite (0 means none)")
        return seconds
    if kind == "queue-name":
        return _check_queue_name(value, key)
    if kind in ("size", "positive", "non-negative"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {_kind(value)}")
        lowest = {"size": UNLIMITED, "positive": 1, "non-negative": 0}[kind]
        if value < lowest:
            what = "-1 (unlimited) or >= 0" if kind == "size" else f">= {lowest}"
            raise ConfigError(f"{key}: must be {what}, got {_show(value)}")
        if value > 2**63 - 1:
            raise ConfigError(f"{key}: {_show(value)} is too large")
        return value
    if kind == "names":
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected an array of names, got {_kind(value)}")
        for i, name in enumerate(value):
            if not isinstance(name, str) or not name or name != name.strip():
                raise ConfigError(f"{key}[{i}]: expected a non-empty name, got {_show(name)}")
        return tuple(value)
    choices = SCHEDULER_POLICIES if kind == "sched-policy" else PLACEMENTS
    if value not in choices:
        raise ConfigError(f"{key}: expected one of {', '.join(choices)}, got {_show(value)}")
    return value


def _flatten_policy(table: object, where: str) -> dict[_Path, Any]:
    """Check a policy table; return its leaves as ``{path: normal value}``.

    Flattening makes "a queue's policy overrides the global one key by key"
    a plain dict update.
    """
    out: dict[_Path, Any] = {}

    def walk(node: object, path: _Path) -> None:
        if not isinstance(node, Mapping):
            raise ConfigError(f"{_key(where, path)}: expected a table, got {_kind(node)}")
        for name, value in node.items():
            child = (*path, str(name))
            if child in _LEAVES:
                out[child] = _check_leaf(_LEAVES[child], value, _key(where, child))
            elif child in _TABLES:
                walk(value, child)
            else:
                raise ConfigError(f"{_key(where, child)}: unknown key")

    walk(table, ())
    return out


@dataclass(frozen=True, slots=True)
class JobSize:
    """Per-job node, core and gpu counts of a limit; :data:`UNLIMITED` (-1) means none."""

    nnodes: int = UNLIMITED
    ncores: int = UNLIMITED
    ngpus: int = UNLIMITED

    def to_dict(self) -> dict[str, int]:
        """The set counts, as in ``limits.job-size.max``."""
        return {key: getattr(self, key) for key in _SIZE_KEYS if getattr(self, key) != UNLIMITED}


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    """``policy.scheduler``: read by the scheduler only; None means "scheduler default".

    ``policy`` is one of :data:`SCHEDULER_POLICIES`, ``queue_depth`` how many
    pending jobs the scheduler considers per pass, ``reservation_depth`` how
    many of them may hold reservations, ``placement`` one of :data:`PLACEMENTS`.
    """

    policy: str | None = None
    queue_depth: int | None = None
    reservation_depth: int | None = None
    placement: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The set keys, in TOML spelling."""
        pairs = (
            ("policy", self.policy),
            ("queue-depth", self.queue_depth),
            ("reservation-depth", self.reservation_depth),
            ("placement", self.placement),
        )
        return {key: value for key, value in pairs if value is not None}


@dataclass(frozen=True, slots=True)
class Policy:
    """The RFC 33 policy that applies to one queue (global merged with the queue's own).

    Durations are in seconds.  ``default_duration`` None means no default;
    ``max_duration`` None means unlimited (the config spells that ``0`` or
    ``inf``).  ``allow_users``/``allow_groups`` None means the key is absent;
    with both absent anyone may submit.
    """

    default_duration: float | None = None
    default_queue: str | None = None
    max_size: JobSize = field(default_factory=JobSize)
    min_size: JobSize = field(default_factory=JobSize)
    max_duration: float | None = None
    allow_users: tuple[str, ...] | None = None
    allow_groups: tuple[str, ...] | None = None
    scheduler: SchedulerPolicy = field(default_factory=SchedulerPolicy)

    @classmethod
    def from_dict(cls, table: Mapping[str, Any], where: str = "policy") -> Policy:
        """Check a policy table (the RFC 33 ``[policy]`` form) and build a Policy.

        ``where`` prefixes the key named in a :class:`ConfigError`.
        """
        flat = _flatten_policy(table, where)
        return _build_policy(flat, where, {where: flat})

    def to_dict(self) -> dict[str, Any]:
        """The policy as an RFC 33 table that :meth:`from_dict` reads back equal.

        Durations are written as numbers of seconds, so nothing is rounded.
        """
        out: dict[str, Any] = {}
        system: dict[str, Any] = {}
        if self.default_duration is not None:
            system["duration"] = self.default_duration
        if self.default_queue is not None:
            system["queue"] = self.default_queue
        if system:
            out["jobspec"] = {"defaults": {"system": system}}
        limits: dict[str, Any] = {}
        sizes = {name: size.to_dict() for name, size in
                 (("max", self.max_size), ("min", self.min_size))}
        sizes = {name: size for name, size in sizes.items() if size}
        if sizes:
            limits["job-size"] = sizes
        if self.max_duration is not None:
            limits["duration"] = self.max_duration
        if limits:
            out["limits"] = limits
        access: dict[str, Any] = {}
        if self.allow_users is not None:
            access["allow-user"] = list(self.allow_users)
        if self.allow_groups is not None:
            access["allow-group"] = list(self.allow_groups)
        if access:
            out["access"] = access
        scheduler = self.scheduler.to_dict()
        if scheduler:
            out["scheduler"] = scheduler
        return out

    @property
    def restricts_access(self) -> bool:
        """True if ``allow-user`` or ``allow-group`` is set."""
        return self.allow_users is not None or self.allow_groups is not None

    def allows(self, username: str | None, groups: Iterable[str] = ()) -> bool:
        """True if the user may submit: no restriction, or named, or in a named group."""
        if not self.restricts_access:
            return True
        if username is not None and username in (self.allow_users or ()):
            return True
        allowed_groups = self.allow_groups or ()
        return any(group in allowed_groups for group in groups)


def _build_policy(flat: Mapping[_Path, Any], where: str,
                  sources: Mapping[str, Mapping[_Path, Any]]) -> Policy:
    """Build a Policy from merged leaves and check the rules that span keys.

    ``sources`` maps each contributing table's key prefix to its own leaves,
    so that an error names the table the offending value came from.
    """

    def origin(path: _Path) -> str:
        found = where
        for prefix, leaves in sources.items():
            if path in leaves:
                found = prefix
        return _key(found, path)

    def size(bound: str) -> JobSize:
        values = {key: flat.get(("limits", "job-size", bound, key), UNLIMITED)
                  for key in _SIZE_KEYS}
        return JobSize(**values)

    max_size, min_size = size("max"), size("min")
    for key in _SIZE_KEYS:
        low, high = getattr(min_size, key), getattr(max_size, key)
        if UNLIMITED not in (low, high) and low > high:
            raise ConfigError(
                f"{origin(('limits', 'job-size', 'min', key))}: minimum {low} is greater than "
                f"the maximum {high} ({origin(('limits', 'job-size', 'max', key))})"
            )
    limit = flat.get(("limits", "duration"))
    # flux reads a duration limit of 0 as "unlimited"; inf says the same.
    max_duration = None if limit is None or limit == 0 or math.isinf(limit) else float(limit)
    default = flat.get(("jobspec", "defaults", "system", "duration"))
    default_duration = float(default) if default else None
    if default_duration is not None and max_duration is not None \
            and default_duration > max_duration:
        raise ConfigError(
            f"{origin(('jobspec', 'defaults', 'system', 'duration'))}: default "
            f"{format_duration(default_duration)} exceeds the duration limit "
            f"{format_duration(max_duration)} ({origin(('limits', 'duration'))})"
        )
    return Policy(
        default_duration=default_duration,
        default_queue=flat.get(_DEFAULT_QUEUE),
        max_size=max_size,
        min_size=min_size,
        max_duration=max_duration,
        allow_users=flat.get(("access", "allow-user")),
        allow_groups=flat.get(("access", "allow-group")),
        scheduler=SchedulerPolicy(
            policy=flat.get(("scheduler", "policy")),
            queue_depth=flat.get(("scheduler", "queue-depth")),
            reservation_depth=flat.get(("scheduler", "reservation-depth")),
            placement=flat.get(("scheduler", "placement")),
        ),
    )


# -- the configuration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """A job accepted into a queue: the queue (None: the anonymous one), the
    jobspec with defaults and ``requires`` applied, and the queue's policy."""

    queue: str | None
    jobspec: Jobspec
    policy: Policy


@dataclass(frozen=True, slots=True)
class _Queue:
    requires: tuple[str, ...]
    policy: Policy


def _check_requires(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected an array of property names, got {_kind(value)}")
    for i, prop in enumerate(value):
        here = f"{where}[{i}]"
        if not isinstance(prop, str):
            raise ConfigError(f"{here}: expected a property name, got {_kind(prop)}")
        # Whitespace is legal in RFC 20 names but is surely a typo here (flux agrees).
        if any(char.isspace() for char in prop):
            raise ConfigError(f"{here}: property name {_show(prop)} contains whitespace")
        # "^name" (RFC 31 negation) lets a queue exclude nodes, e.g. "^login".
        try:
            check_property_name(prop[1:] if prop.startswith("^") else prop, here)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return tuple(value)


class QueueConfig:
    """The ``[policy]`` and ``[queues]`` configuration of an instance (RFC 33).

    Build with :meth:`from_toml` or :meth:`from_dict`; immutable afterwards.
    Without a ``[queues]`` table (or with an empty one) there is one
    anonymous queue, named None.  Other top-level tables belong to other
    subsystems and are ignored.
    """

    __slots__ = ("_default_queue", "_global", "_queues")

    _global: Policy
    _queues: dict[str, _Queue]
    _default_queue: str | None

    def __init__(self, global_policy: Policy, queues: Mapping[str, _Queue],
                 default_queue: str | None) -> None:
        """Internal: use :meth:`from_dict` or :meth:`from_toml`, which validate."""
        self._global = global_policy
        self._queues = dict(queues)
        self._default_queue = default_queue

    # -- construction --------------------------------------------------------

    @classmethod
    def from_toml(cls, text: str | bytes) -> QueueConfig:
        """Parse TOML text (the instance config file) and check it as :meth:`from_dict` does."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"config is not valid UTF-8 (byte {exc.start})") from None
        if not isinstance(text, str):
            raise ConfigError(f"config must be TOML text, got {type(text).__name__}")
        try:
            obj = tomllib.loads(text)
        except ValueError as exc:
            # TOMLDecodeError, or plain ValueError for an integer of thousands of digits
            raise ConfigError(f"invalid TOML: {str(exc).splitlines()[0]}") from None
        except RecursionError:
            raise ConfigError("invalid TOML: nested too deeply") from None
        return cls.from_dict(obj)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> QueueConfig:
        """Check the ``policy`` and ``queues`` tables of a config mapping.

        Raises :class:`ConfigError` naming the offending key: unknown keys,
        wrong types, bad durations or sizes, bad queue names or ``requires``,
        a minimum above a maximum, a default duration above the limit, a
        queue policy that sets the default queue, a default queue that is
        not configured, or several queues and no default queue.
        """
        if not isinstance(obj, Mapping):
            raise ConfigError(f"config: expected a table, got {_kind(obj)}")
        global_flat = _flatten_policy(obj.get("policy", {}), "policy")
        global_policy = _build_policy(global_flat, "policy", {"policy": global_flat})
        raw_queues = obj.get("queues", {})
        if not isinstance(raw_queues, Mapping):
            raise ConfigError(f"queues: expected a table, got {_kind(raw_queues)}")

        queues: dict[str, _Queue] = {}
        for raw_name, entry in raw_queues.items():
            name = _check_queue_name(raw_name, _key("queues", (raw_name,)))
            where = f"queues.{name}"
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{where}: expected a table, got {_kind(entry)}")
            for key in entry:
                if key not in _QUEUE_KEYS:
                    raise ConfigError(f"{_key(where, (key,))}: unknown key")
            requires = _check_requires(entry.get("requires", []), f"{where}.requires")
            queue_where = f"{where}.policy"
            queue_flat = _flatten_policy(entry.get("policy", {}), queue_where)
            if _DEFAULT_QUEUE in queue_flat:
                raise ConfigError(
                    f"{_key(queue_where, _DEFAULT_QUEUE)}: only the global [policy] may set "
                    "the default queue"
                )
            merged = {**global_flat, **queue_flat}
            policy = _build_policy(merged, queue_where,
                                   {"policy": global_flat, queue_where: queue_flat})
            queues[name] = _Queue(requires, policy)

        default = global_policy.default_queue
        key = _key("policy", _DEFAULT_QUEUE)
        if default is not None and default not in queues:
            raise ConfigError(f"{key}: {default!r} is not a configured queue")
        if default is None and len(queues) > 1:
            raise ConfigError(f"{key}: required when more than one queue is configured")
        if default is None and len(queues) == 1:
            # RFC 33 only demands a default when there is a choice to make.
            default = next(iter(queues))
        return cls(global_policy, queues, default)

    # -- inspection ------------------------------------------------------------

    @property
    def named(self) -> bool:
        """True if queues are configured (else there is one anonymous queue)."""
        return bool(self._queues)

    @property
    def queue_names(self) -> tuple[str | None, ...]:
        """The configured queue names in config order, or ``(None,)`` for the anonymous queue."""
        return tuple(self._queues) if self._queues else (None,)

    @property
    def default_queue(self) -> str | None:
        """The queue jobs go to when they name none (None with the anonymous queue)."""
        return self._default_queue

    @property
    def global_policy(self) -> Policy:
        """The ``[policy]`` table alone."""
        return self._global

    def check_queue(self, name: str | None) -> str | None:
        """Return ``name`` if it names a queue here (None for the anonymous one), else raise.

        For administrative tools: PolicyError ``invalid queue 'x' specified``,
        ``... no queues are configured``, or ``a queue name is required``.
        """
        if not self._queues:
            if name is not None:
                raise PolicyError(
                    f"invalid queue {_show(name)} specified: no queues are configured"
                )
            return None
        if name is None:
            raise PolicyError("a queue name is required: queues are configured")
        if name not in self._queues:
            raise PolicyError(f"invalid queue {_show(name)} specified")
        return name

    def effective_policy(self, queue: str | None = None) -> Policy:
        """The policy of ``queue``: the global policy overridden key by key by the queue's.

        ``None`` gives the global policy (which is the anonymous queue's).
        Raises PolicyError for an unknown queue.
        """
        if queue is None:
            return self._global
        return self._queues[self.check_queue(queue) or ""].policy

    def requires(self, queue: str | None) -> tuple[str, ...]:
        """The properties every job in ``queue`` must run on (``queues.NAME.requires``)."""
        if queue is None:
            return ()
        return self._queues[self.check_queue(queue) or ""].requires

    def __repr__(self) -> str:
        """Short summary: the queue names and the default."""
        return f"<QueueConfig queues={list(self._queues)} default={self._default_queue!r}>"

    # -- admission ---------------------------------------------------------------

    def admit(
        self,
        jobspec: Jobspec,
        userid: int,
        username: str | None,
        groups: Iterable[str] = (),
        queue_states: Mapping[str | None, QueueState] | None = None,
        check_limits: bool = True,
    ) -> Admission:
        """Decide whether ``jobspec`` may be submitted, and to which queue.

        The checks run in this order: the queue exists, it is enabled (per
        ``queue_states``; missing means enabled), the user (by name or one of
        ``groups``) has access, then the jobspec defaults (duration, queue)
        are applied and the size and duration limits checked.  A job without
        a duration exceeds any duration limit, as in flux.  Returns an
        :class:`Admission` whose jobspec also requires the queue's
        ``requires`` properties; raises :class:`PolicyError` otherwise.
        Without ``check_limits`` (an instance owner's update of another user's
        job, which flux lets bypass them) the size and duration limits are not
        checked; everything else is.
        """
        named = bool(self._queues)
        requested = jobspec.queue
        if not named:
            if requested is not None:
                raise PolicyError(
                    f"invalid queue {_show(requested)} specified: no queues are configured"
                )
            queue: str | None = None
        else:
            queue = requested if requested is not None else self._default_queue
            if queue is None:  # pragma: no cover - from_dict guarantees a default
                raise PolicyError("no queue specified and there is no default queue")
            if queue not in self._queues:
                raise PolicyError(f"invalid queue {_show(queue)} specified")

        state = (queue_states or {}).get(queue)
        if state is not None and not state.enabled:
            what = f"queue {queue}" if queue is not None else "job submission"
            reason = f": {state.enable_reason}" if state.enable_reason else ""
            raise PolicyError(f"{what} is disabled{reason}")

        entry = self._queues.get(queue) if queue is not None else None
        policy = entry.policy if entry is not None else self._global
        if not policy.allows(username, groups):
            who = username if username is not None else str(userid)
            target = f"to queue {queue}" if queue is not None else "jobs"
            raise PolicyError(f"user {who} is not allowed to submit {target}")

        spec = jobspec
        needs_duration = policy.default_duration is not None and not spec.duration
        needs_queue = queue is not None and requested is None
        if needs_duration or needs_queue:
            # with_system_defaults re-validates the document, so skip it when idle.
            spec = spec.with_system_defaults(
                duration=policy.default_duration if needs_duration else None,
                queue=queue if needs_queue else None,
            )
        if check_limits:
            _check_limits(spec, policy, queue)
        if entry is not None and entry.requires:
            spec = spec.add_required_properties(list(entry.requires))
        return Admission(queue, spec, policy)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _check_limits(spec: Jobspec, policy: Policy, queue: str | None) -> None:
    """Raise PolicyError if ``spec`` is outside the size or duration limits of ``policy``."""
    where = f"queue {queue}" if queue is not None else "the instance"
    requested = {"nnodes": spec.nnodes, "ncores": spec.ncores, "ngpus": spec.ngpus}
    nouns = {"nnodes": "node", "ncores": "core", "ngpus": "gpu"}
    for key in _SIZE_KEYS:
        limit = getattr(policy.max_size, key)
        if limit != UNLIMITED and requested[key] > limit:
            raise PolicyError(
                f"job requests {_plural(requested[key], nouns[key])}, "
                f"{where} allows at most {limit}"
            )
    for key in _SIZE_KEYS:
        limit = getattr(policy.min_size, key)
        if limit != UNLIMITED and requested[key] < limit:
            raise PolicyError(
                f"job requests {_plural(requested[key], nouns[key])}, "
                f"{where} requires at least {limit}"
            )
    if policy.max_duration is not None:
        duration = spec.duration
        if duration == 0 or duration > policy.max_duration:
            shown = format_duration(duration) if duration else "unlimited"
            suffix = f" for queue {queue}" if queue is not None else ""
            raise PolicyError(
                f"job duration {shown} exceeds the limit of "
                f"{format_duration(policy.max_duration)}{suffix}"
            )


# -- queue state ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueState:
    """Administrative state of one queue.

    ``enabled``: jobs may be submitted (``enable_reason`` says why not when
    disabled); ``started``: the scheduler is given its jobs (``stop_reason``
    optionally says why not).  Queues start enabled and started.
    """

    enabled: bool = True
    enable_reason: str | None = None
    started: bool = True
    stop_reason: str | None = None

    @property
    def disable_reason(self) -> str | None:
        """Alias of ``enable_reason``: why the queue is disabled."""
        return self.enable_reason


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """An administrative change to one queue, or to all of them.

    ``kind`` is one of :data:`QUEUE_EVENT_KINDS`.  ``queue`` None with
    ``all_queues`` False names the anonymous queue.  ``disable`` needs a
    reason; ``stop`` may have one; ``enable`` and ``start`` take none.
    """

    kind: str
    queue: str | None
    timestamp: float
    reason: str | None = None
    all_queues: bool = False

    def __post_init__(self) -> None:
        """Refuse events that make no sense, with PolicyError."""
        if self.kind not in QUEUE_EVENT_KINDS:
            raise PolicyError(
                f"queue event: kind must be one of {', '.join(QUEUE_EVENT_KINDS)}, "
                f"got {_show(self.kind)}"
            )
        if self.queue is not None and not isinstance(self.queue, str):
            raise PolicyError(f"queue event: queue must be a name or None, got {_show(self.queue)}")
        if not isinstance(self.all_queues, bool):
            raise PolicyError("queue event: all_queues must be true or false")
        if self.all_queues and self.queue is not None:
            raise PolicyError("queue event: give a queue name or all_queues, not both")
        stamp = self.timestamp
        if isinstance(stamp, bool) or not isinstance(stamp, int | float) \
                or not _finite(stamp) or stamp < 0:
            raise PolicyError(f"queue event: invalid timestamp {_show(stamp)}")
        if self.reason is not None and not isinstance(self.reason, str):
            raise PolicyError(f"queue event: reason must be a string, got {_show(self.reason)}")
        if self.kind == "disable" and not self.reason:
            raise PolicyError("queue event: disable needs a reason")
        if self.kind in ("enable", "start") and self.reason is not None:
            raise PolicyError(f"queue event: {self.kind} takes no reason")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :meth:`from_dict` reads it back."""
        out: dict[str, Any] = {"kind": self.kind, "timestamp": self.timestamp}
        if self.queue is not None:
            out["queue"] = self.queue
        if self.reason is not None:
            out["reason"] = self.reason
        if self.all_queues:
            out["all"] = True
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> QueueEvent:
        """Decode the :meth:`to_dict` form; PolicyError if malformed."""
        if not isinstance(obj, Mapping):
            raise PolicyError(f"queue event: expected a mapping, got {_kind(obj)}")
        extra = set(obj) - {"kind", "timestamp", "queue", "reason", "all"}
        if extra:
            raise PolicyError(f"queue event: unknown key {_show(sorted(extra)[0])}")
        if "kind" not in obj or "timestamp" not in obj:
            raise PolicyError("queue event: kind and timestamp are required")
        return cls(kind=obj["kind"], queue=obj.get("queue"), timestamp=obj["timestamp"],
                   reason=obj.get("reason"), all_queues=obj.get("all", False))


def _finite(value: float) -> bool:
    """math.isfinite, but False (not OverflowError) for an int too large for a float."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def initial_states(config: QueueConfig) -> dict[str | None, QueueState]:
    """Every queue of ``config`` enabled and started (key None: the anonymous queue)."""
    return {name: QueueState() for name in config.queue_names}


def _apply_one(kind: str, reason: str | None, state: QueueState) -> QueueState:
    if kind == "enable":
        return QueueState(True, None, state.started, state.stop_reason)
    if kind == "disable":
        return QueueState(False, reason, state.started, state.stop_reason)
    if kind == "start":
        return QueueState(state.enabled, state.enable_reason, True, None)
    return QueueState(state.enabled, state.enable_reason, False, reason)


def fold_queue_events(config: QueueConfig, events: Iterable[Mapping[str, Any]]
                      ) -> dict[str | None, QueueState]:
    """Every configured queue's state after the admin ``events`` (dicts as stored).

    Malformed entries are skipped: an admin mistake in the log cannot stop
    or disable a queue.
    """
    states = initial_states(config)
    for obj in events:
        try:
            states = apply_queue_event(QueueEvent.from_dict(obj), states)
        except (PolicyError, ValueError, TypeError):
            continue
    return states


def apply_queue_event(
    event: QueueEvent,
    states: Mapping[str | None, QueueState],
    strict: bool = False,
) -> dict[str | None, QueueState]:
    """Return the queue states after ``event`` (``states`` is not modified).

    An event for a queue that is not in ``states`` is ignored, so that a log
    still replays after a queue was removed from the configuration; with
    ``strict`` (for new requests) it raises PolicyError instead.
    """
    out = dict(states)
    if event.all_queues:
        targets: list[str | None] = list(out)
    elif event.queue in out:
        targets = [event.queue]
    elif strict:
        shown = "the anonymous queue" if event.queue is None else f"queue {event.queue!r}"
        raise PolicyError(f"{shown} is not configured")
    else:
        targets = []
    for name in targets:
        out[name] = _apply_one(event.kind, event.reason, out[name])
    return out
