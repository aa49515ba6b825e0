"""Draining and undraining nodes (``fluxes resource drain|undrain`` and the web's
drain buttons): which ranks a target names, and the event that asks for it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fluxes.formats.idset import IDSet
    from fluxes.formats.rset import ResourceSet
    from fluxes.store.instance import Instance

#: The resource admin actions.
KINDS = ("drain", "undrain")


def target_ranks(rset: ResourceSet, targets: str) -> IDSet:
    """The ranks ``targets`` names: an idset of ranks (``0-3``) or a hostlist
    (``node[0-3]``); ValueError (one line) for unknown ranks or hosts, or none."""
    from fluxes.formats.idset import IDSet

    try:
        ranks = IDSet(targets)
    except ValueError:
        ranks = rset.ranks_for_hosts(targets)  # ValueError names unknown hosts
    unknown = ranks - rset.ranks
    if unknown:
        raise ValueError(f"unknown rank(s) {unknown}")
    if not ranks:
        raise ValueError("name some nodes")
    return ranks


def request_drain(inst: Instance, kind: str, ranks: IDSet, reason: str = "") -> str:
    """Append the ``kind`` (drain or undrain) event for ``ranks``; its stream id (the
    scheduler applies it on its next housekeeping, about a second). NoPermissionError
    unless this is the instance owner's connection."""
    from fluxes.store.resources import send_resource_event

    if kind not in KINDS:
        raise ValueError(f"unknown resource action {kind[:20]!r}")
    return send_resource_event(inst, kind, str(ranks), reason)
