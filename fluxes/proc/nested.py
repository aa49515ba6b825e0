"""A child instance inside a job's allocation (``fluxes batch``, ``fluxes alloc``).

The job runs one task per node: ``fluxes instance-child`` (this module's
:func:`run_child`). The task on the job's first node (node rank 0), the
*leader*, records the child instance on the parent's Redis under the
namespace :func:`fluxes.domain.nested.child_namespace` gives (its own hash
tag), with the job's R as its inventory and the job's owner as its owner,
and supervises the child's services (ingest, job manager, scheduler, job
list, accounting) and the exec worker of child rank 0. The task on each other
node runs the exec worker of its child rank. The leader then runs the batch
script (or, for ``fluxes alloc``, waits for the client to say it is done)
with ``FLUXES_URI`` naming the child.

When the script exits, the leader cancels the child's active jobs, waits
(briefly) for them to end, marks the child ``stopped`` and stops its workers;
the other nodes' tasks see the mark and stop theirs; the job's exit code is
the script's. When the parent job is canceled or reaches its time limit, the
parent's exec worker signals every task's process group: each task stops its
workers the same way (the exec workers kill their tasks), and a task killed
outright takes its workers with it (they die with their parent).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from fluxes.domain.nested import BATCH_ATTRIBUTE, child_namespace, child_resources
from fluxes.env import ENV_URI
from fluxes.errors import FluxesError
from fluxes.formats.idset import IDSet
from fluxes.proc.launcher import READY_TIMEOUT_S, Launcher, _exit_code
from fluxes.store.client import Client
from fluxes.store.errors import NoPermissionError, StoreError
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.jobhash import JobHashes
from fluxes.store.joblist_read import active_ids
from fluxes.store.keys import Keys
from fluxes.store.security import strip_password

#: How long the leader waits for the child's canceled jobs to end before stopping it.
DRAIN_TIMEOUT_S = 10.0
#: ... when the parent job itself is ending (its tasks get SIGKILL after the kill grace).
DRAIN_TIMEOUT_SIGNALED_S = 1.0
#: How often the supervising loops look around.
TICK_S = 0.1
#: Instance facts the child's life is told by (in ``{child}:instance``).
STOPPED = "stopped"
EXIT_CODE = "exit_code"
#: Set by ``fluxes alloc`` when its command ended: the leader then stops the child.
STOP_REQUESTED = "stop_requested"
#: Recorded by the leader once the child's services are up (``fluxes alloc``/``proxy``
#: connect only then: the exec worker may record the child earlier, see docs/nested.md).
READY = "ready"
#: The jobspec attribute (under ``attributes.system``) holding a batch script.
SCRIPT_ATTRIBUTE = BATCH_ATTRIBUTE


#: Signals a user sends a job (``fluxes job kill -s``, ``job killall -s``) that would
#: end a task by default but mean "tell the work": the leader forwards them to the
#: child's running jobs instead of dying, as a flux instance's broker decides for its
#: own (docs/nested.md, "Signals").
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)


class _Stop:
    """Remembers a termination signal (the parent job being canceled or timing out),
    and the signals to forward to the child's jobs."""

    def __init__(self) -> None:
        self.signum = 0
        self.forward: list[int] = []

    def __call__(self, signum: int, frame: object) -> None:
        if signum in FORWARDED:
            self.forward.append(signum)
        else:
            self.signum = signum


def task_facts(environ: Mapping[str, str]) -> tuple[str, int, int, int]:
    """The parent instance URI, job id, node rank and node count this task runs with
    (the ``FLUXES_*`` variables exec gives every task); FluxesError outside a job."""
    try:
        return (environ[ENV_URI], int(environ["FLUXES_JOB_ID_DEC"]),
                int(environ["FLUXES_NODE_RANK"]), int(environ["FLUXES_JOB_NNODES"]))
    except (KeyError, ValueError):
        raise FluxesError("instance-child runs as the tasks of a job (fluxes batch, "
                          "fluxes alloc), not on its own") from None


def child_uri(parent: Instance, jobid: int) -> InstanceURI:
    """The URI of the child instance job ``jobid`` of ``parent`` runs."""
    return InstanceURI(parent.uri.redis_url, child_namespace(parent.keys.ns, jobid))


def run_child(command: Sequence[str], *, batch: bool,
              environ: Mapping[str, str] | None = None) -> int:
    """Run this task's part of a child instance (see the module doc); the exit code."""
    parent_uri, jobid, node_rank, _nnodes = task_facts(os.environ if environ is None
                                                       else environ)
    parent = Instance.connect(parent_uri, client_name="fluxes-child")
    uri = child_uri(parent, jobid)
    stop = _Stop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, *FORWARDED):
        signal.signal(sig, stop)
    state = Path(tempfile.mkdtemp(prefix=f"fluxes-{uri.ns}-r{node_rank}-"))
    try:
        if node_rank == 0:
            return _leader(parent, jobid, uri, state, list(command), batch, stop)
        return _follower(parent, uri, node_rank, state, stop)
    except NoPermissionError:
        # A fluxes user's ACL reaches only the parent's keys: the child works with the
        # identity scoped to its namespace that the parent's exec worker creates (it
        # did not here: a worker without ACL rights, docs/nested.md "Credentials").
        raise FluxesError("child instance: this instance's Redis ACL user may not write "
                          f"the child's keys ({uri.ns}), and the job got no identity of "
                          "the child's (docs/nested.md)") from None
    finally:
        shutil.rmtree(state, ignore_errors=True)


def _leader(parent: Instance, jobid: int, uri: InstanceURI, state: Path,
            command: list[str], batch: bool, stop: _Stop) -> int:
    """Record and start the child, run the script in it, stop it; the script's code."""
    job = JobHashes(parent.redis, parent.keys).get(jobid)
    if job is None or job.R is None:
        raise FluxesError(f"instance-child: job {jobid} has no R")
    resources, ranks = child_resources(job.R)
    script = _script(job.effective_jobspec) if batch else None
    launcher = Launcher(state_dir=state, redis_url=parent.uri.redis_url, namespace=uri.ns,
                        partitions=1, resource_table=resources, exec_ranks=[0],
                        facts={"parent_ns": parent.keys.ns, "parent_jobid": jobid,
                               "parent_ranks": str(IDSet(ranks))})
    code = 1  # what the job ends with if the child cannot be brought up
    try:
        launcher.start()
        parent.redis.hset(Keys(uri.ns).instance, READY, repr(time.time()))
        # Under Redis ACLs the child's identity may not write the parent's keys: the
        # exec worker that created the identity recorded the child there already.
        with contextlib.suppress(NoPermissionError):
            parent.redis.hset(parent.keys.children, str(jobid), uri.ns)
        child = Instance(uri, client_name="fluxes-child")
        if script is not None:
            path = state / "script"
            path.write_text(script)
            path.chmod(0o700)
            command = [str(path), *command]
        if command:
            code = _run_script(launcher, command, child, stop)
        else:
            _wait_for_stop(launcher, child, stop)
            code = 0
        _drain(child, DRAIN_TIMEOUT_SIGNALED_S if stop.signum else DRAIN_TIMEOUT_S)
    finally:
        # whatever happened, the other nodes' tasks must learn that the child is over
        with contextlib.suppress(StoreError):
            parent.redis.hset(Keys(uri.ns).instance, mapping={STOPPED: repr(time.time()),
                                                              EXIT_CODE: code})
        launcher.stop()
    return code


def _script(jobspec: bytes | None) -> str:
    """The batch script a jobspec carries (``attributes.system.batch.script``)."""
    try:
        doc: Any = orjson.loads(jobspec or b"null")
        script = doc["attributes"]["system"][SCRIPT_ATTRIBUTE]["script"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise FluxesError("instance-child --batch: the job carries no batch script") from None
    if not isinstance(script, str):
        raise FluxesError("instance-child --batch: the batch script is not text")
    return script


def child_environment(uri: InstanceURI, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with FLUXES_URI naming the child (without a password: the credentials
    come from ``$FLUXES_CREDENTIALS`` or the user's file, as everywhere) and this fluxes
    first on PATH."""
    env = dict(environ, **{ENV_URI: str(InstanceURI(strip_password(uri.redis_url), uri.ns))})
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bindir, *[p for p in env.get("PATH", "").split(os.pathsep)
                                              if p and p != bindir]])
    return env


def _run_script(launcher: Launcher, command: list[str], child: Instance, stop: _Stop) -> int:
    """Run the script in the child, supervising its workers and forwarding signals to
    its jobs; its exit code."""
    # Same process group as this task: the parent's kill signals reach the script too.
    try:
        proc = subprocess.Popen(command, env=child_environment(child.uri, os.environ),
                                stdin=subprocess.DEVNULL)
    except OSError as exc:
        print(f"fluxes: {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 126
    signaled = False
    while True:
        try:
            return _exit_code(proc.wait(timeout=TICK_S))
        except subprocess.TimeoutExpired:
            pass
        if stop.signum and not signaled:
            proc.send_signal(signal.SIGTERM)
            signaled = True
        forward_signals(child, stop)
        launcher.supervise_once()


def _wait_for_stop(launcher: Launcher, child: Instance, stop: _Stop) -> None:
    """``fluxes alloc``'s child: run until the client says its command ended."""
    while not stop.signum and not child.redis.hexists(child.keys.instance, STOP_REQUESTED):
        forward_signals(child, stop)
        launcher.supervise_once()
        time.sleep(TICK_S)


def forward_signals(child: Instance, stop: _Stop) -> None:
    """Send the signals the job got (``stop.forward``) to every running job of the
    child, as ``fluxes job killall -f -s SIG`` inside it would; the child goes on."""
    while stop.forward:
        signum = stop.forward.pop(0)
        try:
            Client(child).killall(signum, all_users=True)
        except FluxesError as exc:
            print(f"fluxes: instance-child: could not forward signal {signum} to the "
                  f"child's jobs: {exc}", file=sys.stderr)


def active_jobs(child: Instance) -> list[int]:
    """The child's active jobs, as its job list knows them."""
    ids: list[int] = []
    for p in range(child.keys.partitions):
        ids += active_ids(child.redis, child.keys, p)
    return ids


def _drain(child: Instance, timeout: float) -> None:
    """Cancel the child's active jobs and wait (at most ``timeout``) for them to end."""
    deadline = time.monotonic() + timeout
    ids = active_jobs(child)
    if not ids:
        return
    try:
        Client(child).cancel(ids, note="the batch script exited",
                             timeout=max(0.5, timeout))
    except FluxesError:
        return  # the child's exec workers kill what is left when they stop
    while active_jobs(child) and time.monotonic() < deadline:
        time.sleep(TICK_S)


def _follower(parent: Instance, uri: InstanceURI, node_rank: int, state: Path,
              stop: _Stop) -> int:
    """Run child rank ``node_rank``'s exec worker until the child stops."""
    child_keys = Instance(uri, client=parent.redis).keys
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not parent.redis.hexists(child_keys.instance, "partitions"):
        if stop.signum or time.monotonic() > deadline:
            return 0 if stop.signum else 1
        time.sleep(TICK_S)
    launcher = Launcher(state_dir=state, redis_url=parent.uri.redis_url, namespace=uri.ns,
                        services=False, exec_ranks=[node_rank])
    launcher.start()
    try:
        while not stop.signum and not parent.redis.hexists(child_keys.instance, STOPPED):
            stop.forward.clear()  # the leader forwards them, to every rank's jobs
            launcher.supervise_once()
            time.sleep(TICK_S)
    finally:
        launcher.stop()
    return 0
