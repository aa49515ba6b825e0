"""Every Redis key name fluxes uses, in one place.

Keys are namespaced (default ``fx``) and carry a Redis Cluster hash tag so
that every multi-key atomic step touches one slot:

* global keys (users, submit streams, queues, scheduler lease, exec streams)
  carry ``{ns}``;
* partition keys (job eventlogs and hashes, the journal, the job manager's
  fence and inputs, the scheduler protocol streams, the job-list read model)
  carry ``{ns}`` when there is one partition and ``{ns:p<k>}`` when there are
  several, with k = jobid mod partitions.

With one partition everything shares one slot, so any step may be atomic.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Consumer group names, one per reader role.
GROUP_JM = "jm"
GROUP_INGEST = "ingest"
GROUP_JOBLIST = "joblist"
GROUP_EXEC = "exec"
GROUP_SCHED = "sched"
GROUP_ACCOUNTING = "accounting"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for one fluxes instance (namespace) split into ``partitions``."""

    ns: str = "fx"
    partitions: int = 1

    def __post_init__(self) -> None:
        if not self.ns or any(c in self.ns for c in "{}: \t\n"):
            raise ValueError(f"namespace must be a non-empty word, got {self.ns!r}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")

    # ------------------------------------------------------------ tags

    @property
    def g(self) -> str:
        """The global hash-tagged prefix, e.g. ``{fx}``."""
        return f"{{{self.ns}}}"

    def p(self, partition: int) -> str:
        """The hash-tagged prefix of ``partition``."""
        if self.partitions == 1:
            return f"{{{self.ns}}}"
        return f"{{{self.ns}:p{partition}}}"

    def partition_of(self, jobid: int) -> int:
        """The partition that owns ``jobid``."""
        return jobid % self.partitions

    def same_slot(self, a: str, b: str) -> bool:
        """True when keys ``a`` and ``b`` carry the same hash tag."""
        return a[: a.index("}") + 1] == b[: b.index("}") + 1]

    # ------------------------------------------------------------ global keys

    @property
    def instance(self) -> str:
        """Hash: instance facts (owner, partitions, created, config digest)."""
        return f"{self.g}:instance"

    @property
    def children(self) -> str:
        """Hash: jobid -> the namespace of the child instance the job runs (batch, alloc),
        kept after the job ends so the child's jobs stay inspectable."""
        return f"{self.g}:children"

    @property
    def children_purged(self) -> str:
        """Set: namespaces of the child instances of purged jobs whose keys (grandchildren
        included) are still being deleted (fluxes.store.children)."""
        return f"{self.g}:children:purged"

    @property
    def lost_jobs(self) -> str:
        """Hash: job id -> JSON, the acknowledged jobs a Redis crash lost (found by the
        ingest's acknowledgement log, fluxes.store.acklog), until the owner clears them."""
        return f"{self.g}:lost:jobs"

    @property
    def private_salt(self) -> str:
        """String: the instance's secret key for masking dependency descriptions in public
        events (fluxes.domain.job.privacy.masked); users may not read it."""
        return f"{self.g}:private:salt"

    @property
    def users(self) -> str:
        """Hash: user name -> uid, for every user allowed to submit."""
        return f"{self.g}:users"

    def submit(self, user: str) -> str:
        """Stream: one user's requests (submit, cancel, urgency...); ACLs let only them write it."""
        return f"{self.g}:submit:{user}"

    def reply(self, user: str, request: str) -> str:
        """List: the ingest's answer to one request (the client BLPOPs it)."""
        return f"{self.g}:reply:{user}:{request}"

    @property
    def fluid_generators(self) -> str:
        """Counter: hands out FLUID generator ids to ingest processes."""
        return f"{self.g}:fluid:gen"

    @property
    def queues(self) -> str:
        """Stream: queue admin events (enable/disable/start/stop with reasons)."""
        return f"{self.g}:queues"

    def exec_rank(self, rank: int) -> str:
        """Stream: start/kill requests for the exec worker serving ``rank``."""
        return f"{self.g}:exec:rank:{rank}"

    def exec_reply(self, token: str) -> str:
        """Stream: the ranks' output and status of one ``fluxes exec`` (expires)."""
        return f"{self.g}:exec:reply:{token}"

    @property
    def exec_registry(self) -> str:
        """Hash: rank -> exec worker registration and heartbeat."""
        return f"{self.g}:exec:registry"

    def exec_jobs(self, rank: int) -> str:
        """Hash: jobid -> what the exec worker on ``rank`` knows of the job (for restarts)."""
        return f"{self.g}:exec:jobs:{rank}"

    def output(self, owner: int, jobid: int) -> str:
        """Stream: a job's stdout/stderr lines, labelled by task rank; the owner's uid in
        the name lets an ACL keep it private (only the owner and the instance owner read)."""
        return f"{self.g}:output:{owner}:{jobid}"

    def pmi(self, owner: int, jobid: int) -> str:
        """Hash: a job's PMI key-value exchange and barrier rounds between its ranks
        (``fluxes/store/pmi_kvs.py``); the owner's uid in the name keeps it private."""
        return f"{self.g}:pmi:{owner}:{jobid}"

    @property
    def resource_events(self) -> str:
        """Stream: drain/undrain events for execution targets."""
        return f"{self.g}:resource:events"

    @property
    def sched_status(self) -> str:
        """String: the scheduler's latest resource summary (free/allocated/down), JSON."""
        return f"{self.g}:sched:status"

    @property
    def dead_letters(self) -> str:
        """Stream: malformed messages any worker refused, with the error."""
        return f"{self.g}:deadletters"

    @property
    def accounting(self) -> str:
        """Stream: accounting admin events (banks and associations: add/edit/delete)."""
        return f"{self.g}:accounting"

    @property
    def workers(self) -> str:
        """Hash: worker name -> JSON (kind, pid, host, heartbeat) for ``fluxes status``."""
        return f"{self.g}:workers"

    @property
    def hops(self) -> str:
        """Hash: worker name -> JSON hand-off latency histograms (fluxes/proc/hops.py),
        refreshed with the heartbeat; read by ``fluxes bench throughput``."""
        return f"{self.g}:hops"

    # ------------------------------------------------------------ partition keys

    def eventlog(self, jobid: int) -> str:
        """Stream: the job's RFC 21 events (fields ``n`` name, ``t`` time, ``c`` context)."""
        return f"{self.p(self.partition_of(jobid))}:job:{jobid}:eventlog"

    def job(self, jobid: int) -> str:
        """Hash: the job's blob digests, request, R, owner, queue... (fluxes.store.jobhash)."""
        return f"{self.p(self.partition_of(jobid))}:job:{jobid}"

    def blob_prefix(self, partition: int) -> str:
        """The beginning of every blob key of ``partition`` (an owner and a digest follow)."""
        return f"{self.p(partition)}:blob:"

    def blob(self, partition: int, owner: int, digest: str) -> str:
        """Hash: a content-addressed blob of ``owner``'s jobs in ``partition`` (``data``,
        and ``refs``: how many job hashes name it); the owner in the name lets an ACL
        keep it private."""
        return f"{self.blob_prefix(partition)}{owner}:{digest}"

    def private(self, partition: int, owner: int, jobid: int) -> str:
        """Hash: the text of a job's events private to its owner (exception notes,
        dependency descriptions, by eventlog position; ``x``: the summary's cwd and
        dependencies, fluxes.domain.job.privacy); the owner's uid in the name lets an
        ACL keep it private. In the job's partition, so written with its events."""
        return f"{self.p(partition)}:private:{owner}:{jobid}"

    def journal(self, partition: int) -> str:
        """Stream: every event of every job of the partition (``j`` jobid, ``s`` seq, ``n``...)."""
        return f"{self.p(partition)}:journal"

    def checkpoint(self, partition: int) -> str:
        """String: the job manager's snapshot and the journal id it covers."""
        return f"{self.p(partition)}:checkpoint"

    def jm_lease(self, partition: int) -> str:
        """String with TTL: the partition's job-manager leader lease."""
        return f"{self.p(partition)}:jm:lease"

    def jm_fence(self, partition: int) -> str:
        """String: the partition leader's epoch; writes carry it as their fencing token."""
        return f"{self.p(partition)}:jm:fence"

    def jm_new(self, partition: int) -> str:
        """Stream: ids of jobs the ingest created, for the job manager."""
        return f"{self.p(partition)}:jm:new"

    def jm_ctl(self, partition: int) -> str:
        """Stream: cancel/urgency/raise requests forwarded to the job manager."""
        return f"{self.p(partition)}:jm:ctl"

    def sched_req(self, partition: int) -> str:
        """Stream: RFC 27 job manager -> scheduler (hello answer, alloc, free, cancel...)."""
        return f"{self.p(partition)}:sched:req"

    def sched_resp(self, partition: int) -> str:
        """Stream: RFC 27 scheduler -> job manager (hello, ready, alloc/free responses)."""
        return f"{self.p(partition)}:sched:resp"

    def sched_lease(self, partition: int) -> str:
        """String with TTL: the scheduler leader's lease on this partition's session."""
        return f"{self.p(partition)}:sched:lease"

    def sched_fence(self, partition: int) -> str:
        """Counter: the current scheduler epoch of this partition (bumped on every hello);
        R writes and responses carry it as their fencing token."""
        return f"{self.p(partition)}:sched:fence"

    def sched_alive(self, holder: str) -> str:
        """Sharded pub/sub channel (never published to): the scheduler process ``holder`` is
        subscribed to it while it lives, so its subscriber count drops to 0 the moment the
        process dies (Redis closes the connection): a hot standby takes its leases then."""
        return f"{self.g}:sched:alive:{holder}"

    def exec_events(self, partition: int) -> str:
        """Stream: exec workers -> job manager (started, finished, released per rank)."""
        return f"{self.p(partition)}:exec:events"

    def exec_progress(self, partition: int) -> str:
        """Hash: jobid -> ranks that reported started/finished/released so far (multi-rank)."""
        return f"{self.p(partition)}:exec:progress"

    def request_done(self, partition: int, request: str) -> str:
        """List with TTL (``request`` is ``<user>:<req>``): progress records of an ingest
        request (which of its jobs got which ids), so a redelivered request
        creates only the jobs still missing and is answered with all ids."""
        return f"{self.p(partition)}:req:{request}"

    def request_claim(self, partition: int, request: str) -> str:
        """String with TTL (``request`` is ``<user>:<req>``): the ingest worker handling the
        request now (its token), one per partition, so that every commit recording the
        request in the partition can check, atomically, that it still holds it
        (fluxes.store.request_claims)."""
        return f"{self.p(partition)}:claim:req:{request}"

    def joblist_jobs(self, partition: int) -> str:
        """Hash: jobid -> job summary JSON (the job-list read model)."""
        return f"{self.p(partition)}:jl:jobs"

    def joblist_active(self, partition: int) -> str:
        """Set: active jobids (a sorted set by submit time in a model written before,
        kept until it empties)."""
        return f"{self.p(partition)}:jl:active"

    def joblist_inactive(self, partition: int) -> str:
        """Sorted set: inactive jobids by the time they became inactive."""
        return f"{self.p(partition)}:jl:inactive"

    def joblist_counts(self, partition: int) -> str:
        """Hash: counters by state, result, user and queue."""
        return f"{self.p(partition)}:jl:counts"

    def joblist_lease(self, partition: int) -> str:
        """String with TTL: the job-list worker that folds this partition's journal (one at a
        time, so entries are folded in order; the others stand by)."""
        return f"{self.p(partition)}:joblist:lease"

    def joblist_fence(self, partition: int) -> str:
        """Counter: the epoch of the partition's job-list lease; read-model writes carry it as
        their fencing token, so a deposed job-list worker writes nothing."""
        return f"{self.p(partition)}:joblist:fence"

    def acct_usage(self, partition: int) -> str:
        """Hash: ``uid:bank`` -> usage charged in this partition (raw, decayed, jobs)."""
        return f"{self.p(partition)}:acct:usage"

    def acct_open(self, partition: int) -> str:
        """Hash: jobid -> an active job as accounting sees it (who pays, what it holds)."""
        return f"{self.p(partition)}:acct:open"

    def acct_active(self, partition: int) -> str:
        """Hash: ``uid:bank`` -> the number of its active jobs in ``acct:open`` (no zero
        entries), and ``@position``: the folded journal id they are exact at."""
        return f"{self.p(partition)}:acct:active"

    def acct_jobs(self, partition: int) -> str:
        """Hash: jobid -> an ended allocation (user, bank, times, sizes)."""
        return f"{self.p(partition)}:acct:jobs"

    def acct_ended(self, partition: int) -> str:
        """Sorted set: jobids of ended allocations by the time they were freed."""
        return f"{self.p(partition)}:acct:ended"

    def acct_base(self, partition: int) -> str:
        """String: the usage model as of a journal position at or after the journal's trim
        point (zlib JSON), where a rebuild starts once the journal was trimmed."""
        return f"{self.p(partition)}:acct:base"

    def retention(self, partition: int) -> str:
        """Hash: how far the partition's journal was archived and trimmed
        (fluxes.store.retention)."""
        return f"{self.p(partition)}:retention"

    def acct_lease(self, partition: int) -> str:
        """String with TTL: the accounting worker that folds this partition's journal."""
        return f"{self.p(partition)}:acct:lease"

    def acct_fence(self, partition: int) -> str:
        """Counter: the epoch of the partition's accounting lease (the fencing token)."""
        return f"{self.p(partition)}:acct:fence"
