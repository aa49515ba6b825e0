"""A parent instance's view of the child instances its jobs run (``fluxes batch``,
``alloc``, ``proxy``, ``pstree``, ``top``): the ``{ns}:children`` table (job id ->
child namespace) and the marks an instance's hash carries about its life (ready,
stopped, stop requested: fluxes.proc.nested names them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys


class ChildTable:
    """The children table of the instance whose keys are ``keys``."""

    def __init__(self, client: Any, keys: Keys) -> None:
        self.redis = client
        self.keys = keys

    def namespace_of(self, jobid: int) -> str | None:
        """The namespace of the child instance job ``jobid`` runs or ran, else None."""
        raw = self.redis.hget(self.keys.children, str(jobid))
        return None if raw is None else raw.decode()

    def namespaces_of(self, jobids: Sequence[int]) -> list[str | None]:
        """:meth:`namespace_of` of each of ``jobids``, in one round trip."""
        if not jobids:
            return []
        raws = self.redis.hmget(self.keys.children, [str(int(j)) for j in jobids])
        return [None if raw is None else raw.decode() for raw in raws]

    def all(self) -> dict[int, str]:
        """Every job id -> child namespace."""
        return {int(k): v.decode() for k, v in self.redis.hgetall(self.keys.children).items()}


def has_mark(client: Any, keys: Keys, mark: str) -> bool:
    """Whether the instance of ``keys`` carries ``mark`` in its hash."""
    return bool(client.hexists(keys.instance, mark))


def set_mark(client: Any, keys: Keys, mark: str, value: str) -> None:
    """Set ``mark`` in the instance hash of ``keys`` (a request to its workers)."""
    client.hset(keys.instance, mark, value)


def instance_of(inst: Instance, ns: str) -> Instance:
    """The instance of namespace ``ns`` on ``inst``'s Redis (same connection): a child."""
    return Instance(InstanceURI(inst.uri.redis_url, ns), client=inst.redis)
