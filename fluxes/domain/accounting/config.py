"""The ``[accounting]`` table of the instance configuration.

::

    [accounting]
    half-life = "7d"              # Slurm's PriorityDecayHalfLife; "0" turns decay off
    priority-plugin = "multifactor"  # or "default" (urgency only, flux's default)
    reprioritize-interval = "1m"  # how often the job manager recomputes fair share
    reprioritize-min-interval = "5s"  # and soon after usage changed, at most this often

    [accounting.billing]          # what one second of each resource counts for
    cores = 1.0
    gpus = 0.0
    nodes = 0.0

    [accounting.weights]          # multi-factor priority: weight x factor (0..1)
    fairshare = 100000
    age = 1000
    job-size = 1000
    queue = 1000
    urgency = 1000
    max-age = "7d"                # age at which the age factor reaches 1
    favor-small = false           # the job-size factor favours small jobs instead

    [accounting.queue-priority]   # the queue factor is a queue's value over the largest
    debug = 10
    batch = 1
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fluxes.domain.accounting.usage import Billing
from fluxes.errors import ConfigError
from fluxes.formats.fsd import parse_duration

#: Slurm's default PriorityDecayHalfLife.
DEFAULT_HALF_LIFE: Final = 7 * 86400.0
PLUGINS: Final = ("default", "multifactor")
#: The largest weight: five of them still sum below the largest priority.
MAX_WEIGHT: Final = 2**29


@dataclass(frozen=True, slots=True)
class Weights:
    """The multi-factor weights (Slurm's ``PriorityWeight*``) and factor settings."""

    fairshare: int = 100_000
    age: int = 1_000
    job_size: int = 1_000
    queue: int = 1_000
    urgency: int = 1_000
    max_age: float = DEFAULT_HALF_LIFE
    favor_small: bool = False
    queue_priority: Mapping[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        """Weight by factor name (the breakdown's order)."""
        return {"fairshare": self.fairshare, "age": self.age, "job_size": self.job_size,
                "queue": self.queue, "urgency": self.urgency}


@dataclass(frozen=True, slots=True)
class AccountingConfig:
    """A checked ``[accounting]`` table."""

    half_life: float = DEFAULT_HALF_LIFE
    priority_plugin: str = "default"
    reprioritize_interval: float = 60.0
    reprioritize_min_interval: float = 5.0
    billing: Billing = field(default_factory=Billing)
    weights: Weights = field(default_factory=Weights)

    @classmethod
    def from_dict(cls, table: object) -> AccountingConfig:
        """Read ``[accounting]``; ConfigError naming the bad key."""
        if not isinstance(table, Mapping):
            raise ConfigError("accounting: expected a table")
        values: dict[str, Any] = {}
        for key, value in table.items():
            if key == "half-life":
                values["half_life"] = _duration(value, "accounting.half-life", inf=False)
            elif key == "priority-plugin":
                if value not in PLUGINS:
                    raise ConfigError(f"accounting.priority-plugin: expected one of "
                                      f"{', '.join(PLUGINS)}, got {value!r:.40}")
                values["priority_plugin"] = value
            elif key == "reprioritize-interval":
                interval = _duration(value, "accounting.reprioritize-interval", inf=False)
                if interval <= 0:
                    raise ConfigError("accounting.reprioritize-interval: must be > 0")
                values["reprioritize_interval"] = interval
            elif key == "reprioritize-min-interval":
                values["reprioritize_min_interval"] = _duration(
                    value, "accounting.reprioritize-min-interval", inf=False)
            elif key == "billing":
                values["billing"] = _billing(value)
            elif key == "weights":
                values["weights"] = _weights(value, table.get("queue-priority", {}))
            elif key == "queue-priority":
                values.setdefault("weights", _weights({}, value))
            else:
                raise ConfigError(f"accounting.{_key(key)}: unknown key (known: half-life, "
                                  "priority-plugin, reprioritize-interval, "
                                  "reprioritize-min-interval, billing, weights, "
                                  "queue-priority)")
        return cls(**values)


def _key(name: object) -> str:
    text = str(name)
    return text if text.isprintable() and len(text) <= 40 else repr(text[:37] + "...")


def _duration(value: object, where: str, inf: bool) -> float:
    try:
        seconds = parse_duration(value)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if not inf and math.isinf(seconds):
        raise ConfigError(f"{where}: must be finite")
    return seconds


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: expected a number >= 0, got {value!r:.40}")
    return float(value)


def _integer(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_WEIGHT:
        raise ConfigError(f"{where}: expected an integer 0-{MAX_WEIGHT}, got {value!r:.40}")
    return value


def _billing(table: object) -> Billing:
    if not isinstance(table, Mapping):
        raise ConfigError("accounting.billing: expected a table")
    values = {}
    for key, value in table.items():
        if key not in Billing._fields:
            raise ConfigError(f"accounting.billing.{_key(key)}: unknown key "
                              "(known: cores, gpus, nodes)")
        values[key] = _number(value, f"accounting.billing.{key}")
    return Billing(**values)


_WEIGHT_KEYS: Final = {"fairshare": "fairshare", "age": "age", "job-size": "job_size",
                       "queue": "queue", "urgency": "urgency"}


def _weights(table: object, queues: object) -> Weights:
    if not isinstance(table, Mapping):
        raise ConfigError("accounting.weights: expected a table")
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _WEIGHT_KEYS:
            values[_WEIGHT_KEYS[key]] = _integer(value, f"accounting.weights.{key}")
        elif key == "max-age":
            values["max_age"] = _duration(value, "accounting.weights.max-age", inf=False)
        elif key == "favor-small":
            if not isinstance(value, bool):
                raise ConfigError(f"accounting.weights.favor-small: expected true or false, "
                                  f"got {value!r:.40}")
            values["favor_small"] = value
        else:
            raise ConfigError(f"accounting.weights.{_key(key)}: unknown key (known: "
                              f"{', '.join(_WEIGHT_KEYS)}, max-age, favor-small)")
    if not isinstance(queues, Mapping):
        raise ConfigError("accounting.queue-priority: expected a table")
    values["queue_priority"] = {
        str(name): _integer(value, f"accounting.queue-priority.{_key(name)}")
        for name, value in queues.items()}
    return Weights(**values)
