"""The Redis identities of child instances, kept by the exec worker (docs/nested.md).

A job that runs a child instance (``fluxes batch``, ``fluxes alloc``: see
:func:`fluxes.domain.nested.runs_child_instance`) reaches its child's keys with
an ACL user of its own, scoped to them
(:func:`fluxes.store.security.child_acl_rules`). The exec worker serving each
of the job's ranks holds ACL rights and already prepares the job's per-user
directory and starts its tasks as the user, so it is the one that:

* creates the identity of its rank (``child:<child ns>:<rank>``, a random
  password) when it starts the job's tasks there, and writes the credentials
  file (0600, the job's user's, in their directory of the exec state
  directory) whose path the tasks get in ``$FLUXES_CREDENTIALS``; the first
  rank also records the child under the parent job (``{ns}:children``), which
  the identity may not write;
* deletes the identity and the file once the job's end on the rank is
  recorded, whichever way it ended; the first rank's worker, once the whole
  job is inactive, also deletes what other ranks left (a lost node's);
* sweeps, when it (re)starts, the identities of its ranks whose job it no
  longer runs (a worker that died or a node that was lost in between).

Each rank has its own identity, so each worker creates and revokes only what
it made, wherever the ranks run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from fluxes.domain.exec.jobs import ExecJob
from fluxes.domain.nested import child_credentials_name, child_namespace, parent_of
from fluxes.proc.exec_files import TaskFiles
from fluxes.store import acl
from fluxes.store.errors import Client
from fluxes.store.instance import InstanceURI
from fluxes.store.keys import Keys
from fluxes.store.security import (
    Credentials,
    child_acl_rules,
    child_user_name,
    generate_password,
    parse_child_user,
    with_userinfo,
    write_credentials,
)


class ChildIdentities:
    """Creates, revokes and sweeps the child identities of one exec worker's ranks.

    ``redis_url`` is the URL the worker connects with; the credentials files
    carry it with the identity's name and password instead of the worker's.
    Nothing happens unless :meth:`setup` found that Redis wants identities and
    this worker may create them (:func:`fluxes.store.acl.manages_users`).
    """

    def __init__(self, client: Client, keys: Keys, redis_url: str, files: TaskFiles) -> None:
        self.client = client
        self.keys = keys
        self.redis_url = redis_url
        self.files = files
        self.enabled = False
        # (rank, jobid) with an identity -> its credentials file (None: found at setup)
        self.held: dict[tuple[int, int], str | None] = {}
        self.first: set[int] = set()  # jobs whose first rank is ours (see jobs_over)

    def setup(self, ranks: Collection[int], live: Iterable[tuple[int, int]]) -> list[str]:
        """Decide whether identities are made here; delete those of ``ranks`` whose job
        is not among ``live`` (rank, jobid); the names deleted."""
        self.held.clear()
        self.first.clear()
        self.enabled = acl.manages_users(self.client)
        if not self.enabled:
            return []
        running = set(live)
        gone = []
        for name in sorted(acl.users(self.client)):
            found = self._ours(name, ranks)
            if found is None:
                continue
            if found in running:
                self.held[found] = None
            else:
                acl.delete_user(self.client, name)
                gone.append(name)
        if gone:
            acl.persist(self.client)
        return gone

    def _ours(self, name: str, ranks: Collection[int]) -> tuple[int, int] | None:
        """(rank, jobid) of a child identity of this instance on one of ``ranks``."""
        parsed = parse_child_user(name)
        if parsed is None:
            return None
        child_ns, rank = parsed
        parent = parent_of(child_ns)
        if parent is None or parent[0] != self.keys.ns or rank not in ranks:
            return None
        return rank, parent[1]

    def path(self, rank: int, jobid: int, uid: int | None) -> str:
        """Where the credentials file of job ``jobid``'s identity on ``rank`` is (``uid``:
        the user's directory, as for the job's other files; None: the rank's)."""
        directory = self.files.directory(rank, uid)
        return os.path.join(directory, child_credentials_name(jobid))

    def create(self, rank: int, jobid: int, owner: int, as_user: bool,
               first_rank: bool) -> str:
        """Create (or renew) the identity of job ``jobid`` on ``rank`` for user ``owner``;
        the path of its credentials file (0600, the user's when ``as_user``)."""
        child_ns = child_namespace(self.keys.ns, jobid)
        name = child_user_name(child_ns, rank)
        password = generate_password()
        uid = owner if as_user else None
        if uid is not None:
            self.files.user_dir(rank, uid)  # made (0700, the user's) and checked
        path = self.path(rank, jobid, uid)
        self.held[(rank, jobid)] = path
        acl.set_user(self.client, name, child_acl_rules(self.keys, jobid, owner, child_ns,
                                                        password))
        uri = InstanceURI(with_userinfo(self.redis_url, name, password), self.keys.ns)
        write_credentials(Path(path), Credentials(str(uri)), uid=uid)
        if first_rank:
            self.client.hset(self.keys.children, str(jobid), child_ns)
            self.first.add(jobid)
        acl.persist(self.client)
        return path

    def revoke(self, job: ExecJob) -> bool:
        """Delete ``job``'s identity on its rank and its credentials file (once its end is
        recorded); True if it had one. Idempotent."""
        key = (job.rank, job.id)
        if key not in self.held:
            return False
        path = self.held[key] or self.path(job.rank, job.id, self.files.owner_of(job))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        name = child_user_name(child_namespace(self.keys.ns, job.id), job.rank)
        if acl.delete_user(self.client, name):
            acl.persist(self.client)
        del self.held[key]
        return True

    def jobs_over(self, jobids: Iterable[int]) -> list[str]:
        """Delete what is left of the identities of ``jobids`` (jobs now inactive) on every
        rank, for those whose first rank is ours: a rank whose worker is gone (a lost
        node) cannot revoke its own. The names deleted."""
        ended = self.first.intersection(jobids)
        if not ended:
            return []
        self.first -= ended
        spaces = {child_namespace(self.keys.ns, jobid) for jobid in ended}
        gone = []
        for name in sorted(acl.users(self.client)):
            parsed = parse_child_user(name)
            if parsed is not None and parsed[0] in spaces:
                acl.delete_user(self.client, name)
                gone.append(name)
        if gone:
            acl.persist(self.client)
        return gone
