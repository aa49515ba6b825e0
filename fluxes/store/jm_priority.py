"""What the job manager's priority plugin is fed from storage.

The multi-factor plugin (:mod:`fluxes.domain.accounting.priority`) needs the
``[accounting]`` settings of the instance configuration, the fair-share table of
the banks and the usage the accounting worker folded, and the instance's size.
:class:`PriorityFeed` reads them, builds the plugin anew when the settings
change (no restart needed) and says when every pending job is due a new
priority: every ``reprioritize-interval``, soon after the usage moved (at most
every ``reprioritize-min-interval``), at once under new settings.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fluxes.config import InstanceConfig
from fluxes.domain.accounting.config import AccountingConfig
from fluxes.domain.accounting.priority import JobFacts, MultiFactorPriority, ReprioritizeTimer
from fluxes.errors import FluxesError
from fluxes.messages.bounds import one_line
from fluxes.store.accounting import AccountsFollower, UsageStore, fair_share_now
from fluxes.store.instance import Instance
from fluxes.store.resources import load_inventory

#: How often the usage marks and the instance configuration are read (one round
#: trip): usage that changed is acted on this soon, new priority settings too.
LOOK_EVERY_S = 1.0
#: the reason :meth:`PriorityFeed.due` gives with a plugin built anew
NEW_SETTINGS = "new priority settings"


class PriorityFeed:
    """The priority plugin of one job manager and what it is fed (see the module)."""

    def __init__(self, instance: Instance, facts: Callable[[int], JobFacts | None]) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        self.facts = facts
        #: the multi-factor plugin (None: flux's default, urgency only)
        self.multifactor: MultiFactorPriority | None = None
        self.timer = ReprioritizeTimer(60.0, 5.0)
        #: the configuration text the plugin was built from, its [accounting] table,
        #: and when the usage marks and the configuration are next read
        self._config_raw: bytes | None = None
        self._accounting: AccountingConfig | None = None
        self._look_at = 0.0
        self._accounts = AccountsFollower(self.redis, self.keys)
        #: a configuration that was not applied, and why (the caller logs it once)
        self.refused: str | None = None

    def _config_text(self) -> bytes | None:
        raw: bytes | None = self.redis.hget(self.keys.instance, "config")
        return raw

    def plugin(self, config: tuple[bytes | None, InstanceConfig] | None = None
               ) -> MultiFactorPriority | None:
        """The plugin ``[accounting] priority-plugin`` names (None: the default), with the
        fair-share table as of now (docs/accounting.md); ``config``: the configuration
        (its text and what it reads as) when the caller read it already."""
        if config is None:
            raw = self._config_text()
            config = raw, InstanceConfig.from_toml(raw) if raw else InstanceConfig()
        self._config_raw = config[0]
        accounting = self._accounting = config[1].accounting
        self.timer = ReprioritizeTimer(accounting.reprioritize_interval,
                                       accounting.reprioritize_min_interval)
        self.multifactor = None
        if accounting.priority_plugin != "multifactor":
            return None
        try:
            inventory = load_inventory(self.instance)
            cores, nodes = inventory.ncores, len(inventory)
        except (FluxesError, ValueError):
            cores, nodes = 0, 0  # no job-size factor without an inventory
        plugin = MultiFactorPriority(accounting.weights, facts=self.facts,
                                     total_cores=cores, total_nodes=nodes)
        self.multifactor = plugin
        self.refresh()
        return plugin

    def refresh(self) -> None:
        """Give the plugin the fair-share table of the banks and the usage folded so far."""
        plugin = self.multifactor
        if plugin is None:
            return
        # the marks first: usage folded after them makes them move again
        marks = UsageStore(self.redis, self.keys).usage_marks()
        self.timer.done(time.monotonic(), marks)
        plugin.update(fair_share_now(self.redis, self.keys, self.instance.config(),
                                     time.time(), accounts=self._accounts.refresh()))

    def due(self) -> tuple[str, MultiFactorPriority | None] | None:
        """Why every pending job is due a new priority now, and under a new
        configuration the plugin to use from now on (the same one otherwise); None
        when nothing is due. The fair-share table is refreshed first."""
        now = time.monotonic()
        marks: tuple[str | None, ...] | None = None
        if now >= self._look_at:
            self._look_at = now + LOOK_EVERY_S
            renewed = self._settings_changed()
            if renewed is not None:
                return NEW_SETTINGS, renewed[0]
            if self.multifactor is not None and self.timer.should_look(now):
                marks = UsageStore(self.redis, self.keys).usage_marks()
        if self.multifactor is None or not self.timer.due(now, marks):
            return None
        periodic = now - self.timer.last >= self.timer.interval
        self.refresh()
        return "periodic" if periodic else "usage changed", self.multifactor

    def _settings_changed(self) -> tuple[MultiFactorPriority | None] | None:
        """Read the configuration when its text changed; under a new ``[accounting]``
        table, the plugin built anew (in a 1-tuple: None is the default plugin)."""
        raw = self._config_text()
        if raw == self._config_raw:
            return None
        try:
            config = InstanceConfig.from_toml(raw) if raw else InstanceConfig()
        except ValueError as exc:
            self._config_raw = raw  # said once; the plugin stays as it was
            self.refused = one_line(str(exc))
            return None
        if config.accounting == self._accounting:
            self._config_raw = raw
            return None
        return (self.plugin((raw, config)),)
