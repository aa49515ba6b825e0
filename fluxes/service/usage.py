"""Raw usage over a period (``fluxes account usage`` and the web's usage page)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluxes.domain.accounting.banks import Accounts
    from fluxes.store.instance import Instance


def user_names(inst: Instance, accounts: Accounts, uids: Iterable[int]) -> dict[int, str]:
    """uid -> user name: associations first, then the instance's users, then this machine."""
    from fluxes.service.users import names_of

    wanted = set(uids)
    known = {uid: name for uid in wanted if (name := accounts.username_of(uid))}
    return names_of(inst, wanted, known)


def usage_report(inst: Instance, since: float, until: float, now: float) -> dict[str, Any]:
    """The ``account usage`` document: raw usage per (user, bank) over [since, until),
    and per bank (a bank counts what is charged to it and to the banks below it)."""
    from fluxes.domain.accounting.usage import (
        NO_USAGE,
        WindowUsage,
        project_usage,
        window_usage,
    )
    from fluxes.store.accounting import UsageStore, load_accounts

    accounts = load_accounts(inst.redis, inst.keys)
    store = UsageStore(inst.redis, inst.keys)
    charges, running = store.charges(since, until), list(store.open_jobs().values())
    found = window_usage(charges, running, since, until, now)
    projects = project_usage(charges, running, since, until, now)
    # a job whose journal names no bank was submitted before any bank existed: it is
    # reported under no bank (bank None), not charged to a bank that did not exist then
    merged: dict[tuple[int, str], WindowUsage] = dict(found)
    names = user_names(inst, accounts, {uid for uid, _b in merged})
    rows = []
    banks: dict[str, WindowUsage] = {}
    for (uid, bank), used in sorted(merged.items(), key=lambda kv: (names[kv[0][0]],
                                                                    kv[0][1])):
        rows.append({"user": names[uid], "userid": uid, "bank": bank or None,
                     **_figures(used)})
        if bank in accounts.banks:
            for name in accounts.path(bank):
                old = banks.get(name, WindowUsage(NO_USAGE, 0))
                banks[name] = WindowUsage(old.figures.plus(used.figures), old.jobs + used.jobs)
    return {"since": since, "until": until, "usage": rows,
            "banks": [{"bank": name, **_figures(used)} for name, used in sorted(banks.items())],
            # "" (null): jobs from before projects were recorded
            "projects": [{"project": name or None, **_figures(used)}
                         for name, used in sorted(projects.items())]}


def _figures(used: Any) -> dict[str, Any]:
    figures = used.figures
    return {"jobs": used.jobs, "core_seconds": figures.core_seconds,
            "gpu_seconds": figures.gpu_seconds, "node_seconds": figures.node_seconds}
