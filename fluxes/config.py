"""The instance configuration: one TOML document shared by every worker.

``fluxes start --config FILE`` checks the file and stores its text in the
instance hash, so every worker (here or on another machine) reads the same
configuration from Redis. Top-level tables:

* ``[policy]`` and ``[queues.NAME]``: RFC 33 queues (:mod:`fluxes.domain.jm.queues`);
* ``[resource]``: the inventory (``[[resource.config]]`` entries, ``path`` of
  an RFC 20 R file, ``graph`` of a JGF / GRUG file or a ``graph-recipe``:
  :mod:`fluxes.domain.graph.table`), read by the scheduler;
* ``[ingest]``: size limits enforced at submission;
* ``[exec]``: ``kill-timeout`` (grace before SIGKILL), ``output-limit`` (bytes of
  output forwarded per job and rank, default 100M, 0 unlimited);
* ``[sched]``: scheduler options (``mode`` of RFC 27 ready, ``limit``,
  ``exec-timeout``: how long an exec worker may be silent before its ranks
  are drained, default 10s; ``stage-depth`` and ``stage-horizon``: staged
  starts, docs/scheduling-policies.md);
* ``[accounting]``: usage decay, billing, priority weights
  (:mod:`fluxes.domain.accounting.config`);
* ``[job-manager]``: retention, as flux names it: ``inactive-age-limit`` (FSD)
  and ``inactive-num-limit`` (inactive jobs purged beyond them, by the job-list
  worker), and ``journal-archive`` (where trimmed journal entries are kept; ""
  for nowhere; default ``<state directory>/archive``) (:class:`RetentionConfig`);
* ``[web]``: ``fluxes web``'s session secret, ``secret`` or ``secret-file``
  (:class:`WebConfig`).

A bad configuration raises :class:`~fluxes.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.domain.accounting.config import AccountingConfig
from fluxes.domain.exec.perilog import KEYS as PERILOG_KEYS
from fluxes.domain.exec.perilog import PerilogConfig
from fluxes.domain.jm.queues import QueueConfig, format_key
from fluxes.errors import ConfigError
from fluxes.formats.fsd import parse_duration

#: Default ``[exec] output-limit``: bytes of output forwarded per job and rank.
DEFAULT_OUTPUT_LIMIT = 100 << 20
_TOP = ("policy", "queues", "resource", "ingest", "exec", "sched", "accounting", "job-manager",
        "web", "forecast")


@dataclass(frozen=True)
class IngestLimits:
    """Size limits checked at submission (all configurable under ``[ingest]``)."""

    max_jobspec_bytes: int = 1 << 20
    max_jobs_per_request: int = 10_000
    max_tasks: int = 1_000_000
    max_command_bytes: int = 1 << 17
    max_environment_bytes: int = 1 << 20

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> IngestLimits:
        """Read ``[ingest]``; ConfigError naming a bad key."""
        names = {
            "max-jobspec-bytes": "max_jobspec_bytes",
            "max-jobs-per-request": "max_jobs_per_request",
            "max-tasks": "max_tasks",
            "max-command-bytes": "max_command_bytes",
            "max-environment-bytes": "max_environment_bytes",
        }
        values: dict[str, int] = {}
        for key, value in obj.items():
            attr = names.get(key)
            if attr is None:
                raise ConfigError(f"ingest.{format_key(key)}: unknown key")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"ingest.{key}: expected a positive integer, got {value!r:.40}")
            values[attr] = value
        return cls(**values)


@dataclass(frozen=True)
class RetentionConfig:
    """``[job-manager]``: how long and how many inactive jobs are kept, and where the
    journal's trimmed entries are archived."""

    #: seconds an inactive job is kept (None: forever)
    inactive_age_limit: float | None = None
    #: inactive jobs kept at most (None: no limit)
    inactive_num_limit: int | None = None
    #: the archive directory; None: the worker's state directory's ``archive``;
    #: "": no archive (trimmed entries are gone)
    journal_archive: str | None = None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> RetentionConfig:
        """Read ``[job-manager]``; ConfigError naming a bad key."""
        if not isinstance(obj, Mapping):
            raise ConfigError("job-manager: expected a table")
        age: float | None = None
        num: int | None = None
        archive: str | None = None
        for key, value in obj.items():
            if key == "inactive-age-limit":
                try:
                    age = parse_duration(value)
                except ValueError as exc:
                    raise ConfigError(f"job-manager.inactive-age-limit: {exc}") from None
            elif key == "inactive-num-limit":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError("job-manager.inactive-num-limit: expected an integer "
                                      f">= 0, got {value!r:.40}")
                num = value
            elif key == "journal-archive":
                if not isinstance(value, str) or "\0" in value:
                    raise ConfigError("job-manager.journal-archive: expected a directory "
                                      f"(or \"\" for none), got {value!r:.40}")
                archive = value
            else:
                raise ConfigError(f"job-manager.{format_key(key)}: unknown key (known: "
                                  "inactive-age-limit, inactive-num-limit, journal-archive)")
        return cls(age, num, archive)


#: Shortest ``[web] secret`` accepted: it signs every session cookie.
MIN_WEB_SECRET = 16


@dataclass(frozen=True)
class WebConfig:
    """``[web]``: what ``fluxes web`` signs its session cookies with, shared by every web
    server of the instance: ``secret`` (the text itself; the stored configuration is
    readable by every user, so prefer) ``secret-file`` (a file only the web servers read)."""

    secret: str | None = None
    secret_file: str | None = None

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> WebConfig:
        """Read ``[web]``; ConfigError naming a bad key."""
        if not isinstance(obj, Mapping):
            raise ConfigError("web: expected a table")
        values: dict[str, str] = {}
        for key, value in obj.items():
            if key not in ("secret", "secret-file"):
                raise ConfigError(f"web.{format_key(key)}: unknown key (known: secret, "
                                  "secret-file)")
            if not isinstance(value, str) or "\0" in value:
                raise ConfigError(f"web.{key}: expected a string, got {value!r:.40}")
            if key == "secret" and len(value) < MIN_WEB_SECRET:
                raise ConfigError(f"web.secret: at least {MIN_WEB_SECRET} characters")
            values[key.replace("-", "_")] = value
        return cls(**values)


@dataclass(frozen=True)
class ForecastConfig:
    """``[forecast]`` (docs/forecast.md): how run times are predicted (``runtime``:
    ``"limit"``, each job runs to its time limit, or ``"history"``, the mean of its
    user's last two run times capped by the limit) and how long a forecast is reused
    (``cache``, seconds)."""

    runtime: str = "limit"
    cache: float = 5.0

    @classmethod
    def from_dict(cls, obj: object) -> ForecastConfig:
        """Read ``[forecast]``; ConfigError naming a bad key."""
        if not isinstance(obj, Mapping):
            raise ConfigError("forecast: expected a table")
        out = cls()
        for key, value in obj.items():
            if key == "runtime":
                if value not in ("limit", "history"):
                    raise ConfigError(f"forecast.runtime: expected \"limit\" or \"history\", "
                                      f"got {value!r:.40}")
                out = dataclasses.replace(out, runtime=value)
            elif key == "cache":
                try:
                    seconds = parse_duration(value)
                except ValueError as exc:
                    raise ConfigError(f"forecast.cache: {exc}") from None
                out = dataclasses.replace(out, cache=seconds)
            else:
                raise ConfigError(f"forecast.{format_key(key)}: unknown key (known: runtime, "
                                  "cache)")
        return out


@dataclass(frozen=True)
class InstanceConfig:
    """A checked instance configuration and the TOML text it came from."""

    text: str = ""
    raw: Mapping[str, Any] = field(default_factory=dict)
    queues: QueueConfig = field(default_factory=lambda: QueueConfig.from_dict({}))
    ingest: IngestLimits = field(default_factory=IngestLimits)
    kill_timeout: float = 5.0
    #: bytes of output forwarded per job and rank (0: unlimited)
    output_limit: int = 100 << 20
    sched: Mapping[str, Any] = field(default_factory=dict)
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    web: WebConfig = field(default_factory=WebConfig)
    forecast: ForecastConfig = field(default_factory=ForecastConfig)

    @property
    def perilog(self) -> PerilogConfig:
        """The ``[exec]`` prolog, epilog and housekeeping (none when not configured)."""
        table = self.raw.get("exec", {})
        return perilog_config(table if isinstance(table, Mapping) else {})

    @property
    def resource(self) -> Mapping[str, Any]:
        """The ``[resource]`` table (empty when absent)."""
        table = self.raw.get("resource", {})
        return table if isinstance(table, Mapping) else {}

    @classmethod
    def from_toml(cls, text: str | bytes) -> InstanceConfig:
        """Parse and check a configuration; ConfigError naming the bad key."""
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"config is not valid UTF-8 (byte {exc.start})") from None
        try:
            raw = tomllib.loads(text)
        except ValueError as exc:
            # TOMLDecodeError, or plain ValueError for an integer of thousands of digits
            raise ConfigError(f"invalid TOML: {str(exc).splitlines()[0]}") from None
        except RecursionError:
            raise ConfigError("invalid TOML: nested too deeply") from None
        for key in raw:
            if key not in _TOP:
                raise ConfigError(f"{format_key(key)}: unknown key (known: {', '.join(_TOP)})")
        queues = QueueConfig.from_dict({k: raw[k] for k in ("policy", "queues") if k in raw})
        ingest = raw.get("ingest", {})
        if not isinstance(ingest, Mapping):
            raise ConfigError("ingest: expected a table")
        kill_timeout, output_limit = _exec_settings(raw.get("exec", {}))
        sched = raw.get("sched", {})
        if not isinstance(sched, Mapping):
            raise ConfigError("sched: expected a table")
        _check_sched(sched)
        if "resource" in raw and not isinstance(raw["resource"], Mapping):
            raise ConfigError("resource: expected a table")
        return cls(text=text, raw=raw, queues=queues, ingest=IngestLimits.from_dict(ingest),
                   kill_timeout=kill_timeout, output_limit=output_limit, sched=dict(sched),
                   accounting=AccountingConfig.from_dict(raw.get("accounting", {})),
                   retention=RetentionConfig.from_dict(raw.get("job-manager", {})),
                   web=WebConfig.from_dict(raw.get("web", {})),
                   forecast=ForecastConfig.from_dict(raw.get("forecast", {})))


def _exec_settings(exec_table: object) -> tuple[float, int]:
    """The ``[exec]`` table's kill timeout (seconds) and output limit (bytes)."""
    if not isinstance(exec_table, Mapping):
        raise ConfigError("exec: expected a table")
    kill_timeout = 5.0
    output_limit = DEFAULT_OUTPUT_LIMIT
    for key, value in exec_table.items():
        if key == "kill-timeout":
            try:
                kill_timeout = parse_duration(value)
            except ValueError as exc:
                raise ConfigError(f"exec.kill-timeout: {exc}") from None
        elif key == "output-limit":
            from fluxes.domain.sched.inventory import parse_size

            try:
                output_limit = parse_size(value, "exec.output-limit")
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        elif key in PERILOG_KEYS:
            continue  # checked by perilog_config
        else:
            raise ConfigError(f"exec.{format_key(key)}: unknown key "
                              "(known: kill-timeout, output-limit, prolog, epilog, "
                              "housekeeping and their -timeout)")
    perilog_config(exec_table)
    return kill_timeout, output_limit


def perilog_config(exec_table: Mapping[str, Any]) -> PerilogConfig:
    """The ``[exec]`` prolog/epilog/housekeeping commands; ConfigError naming a bad key."""
    try:
        return PerilogConfig.from_table(exec_table)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


#: ``[sched] stage-depth`` when not set: jobs a core may have staged behind its own.
STAGE_DEPTH: Final = 3
#: ``[sched] stage-horizon`` when not set: how soon a job must end to be freed early.
STAGE_HORIZON: Final = "20ms"


def stage_settings(sched: Mapping[str, Any]) -> tuple[int, float]:
    """(depth, horizon in seconds) of staged starts from a checked ``[sched]`` table."""
    return (int(sched.get("stage-depth", STAGE_DEPTH)),
            parse_duration(sched.get("stage-horizon", STAGE_HORIZON)))


def _check_staging(key: str, value: object) -> None:
    """``[sched] stage-depth`` (an int >= 0) or ``stage-horizon`` (a finite RFC 23
    duration); ConfigError naming the key."""
    if key == "stage-depth":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"sched.stage-depth: expected an integer >= 0, "
                              f"got {value!r:.40}")
        return
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"expected a duration, got {value!r:.40}")
        if not math.isfinite(parse_duration(value)):
            raise ValueError("must be finite")
    except ValueError as exc:
        raise ConfigError(f"sched.stage-horizon: {exc}") from None


def _check_sched(table: Mapping[str, Any]) -> None:
    for key, value in table.items():
        if key == "mode":
            if value not in ("single", "unlimited", "limited"):
                raise ConfigError(f"sched.mode: expected single, unlimited or limited, "
                                  f"got {value!r:.40}")
        elif key == "exec-timeout":
            try:
                if parse_duration(value) <= 0:
                    raise ValueError("must be > 0")
            except ValueError as exc:
                raise ConfigError(f"sched.exec-timeout: {exc}") from None
        elif key == "limit":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"sched.limit: expected a positive integer, got {value!r:.40}")
        elif key in ("stage-depth", "stage-horizon"):
            _check_staging(key, value)
        else:
            raise ConfigError(f"sched.{format_key(key)}: unknown key")
