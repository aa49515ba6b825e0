"""fluxes on every Redis deployment form: one server (TCP, TLS, unix), Sentinel, Cluster.

The URL and slot checks need no server. The rest start real servers on
free loopback ports in temp dirs: a primary, a replica and three sentinels
(a fluxes instance runs jobs through them, before and after the primary is
killed), and a three-node cluster (the event store's atomic commit on it,
with one and with four partitions), and the event store on a cluster
client.
"""

from __future__ import annotations

import inspect
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from redis.crc import key_slot

from fluxes.domain.job import events as ev
from fluxes.errors import FluxesError
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.store import jobfacts
from fluxes.store.client import Client
from fluxes.store.connection import connect, parse_redis_url, redact
from fluxes.store.eventstore import Batch, CommitResult, EventStore, FencedError
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.keys import Keys
from tests.system.conftest import need_redis

T = 1_700_000_000.0
#: Tests that start servers (the URL and slot checks need none).
system = pytest.mark.system

# ----------------------------------------------------------------------------- URLs (no server)


@pytest.mark.parametrize(("url", "kind", "nodes", "extra"), [
    ("redis://h", "single", (("h", 6379),), {}),
    ("redis://u:p%40ss@h:7000/3", "single", (("h", 7000),),
     {"username": "u", "password": "p@ss", "options": {"db": 3}}),
    ("rediss://h:6380?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required&ssl_certfile=/c"
     "&ssl_keyfile=/k", "single", (("h", 6380),),
     {"tls": True, "options": {"ssl_ca_certs": "/etc/ca.pem", "ssl_cert_reqs": "required",
                               "ssl_certfile": "/c", "ssl_keyfile": "/k"}}),
    ("unix:///run/redis/redis.sock?db=2", "single", (),
     {"socket_path": "/run/redis/redis.sock", "options": {"db": 2}}),
    ("unix://:pw@/tmp/r.sock", "single", (), {"socket_path": "/tmp/r.sock", "password": "pw"}),
    ("unix:///tmp/r.sock?username=u&password=pw", "single", (),
     {"username": "u", "password": "pw", "options": {}}),
    ("redis+sentinel://a:1,b,[::1]:3/mymaster?db=1", "sentinel",
     (("a", 1), ("b", 26379), ("::1", 3)), {"service": "mymaster", "options": {"db": 1}}),
    ("rediss+sentinel://u:p@s1:26379/m?sentinel_password=sp&ssl_ca_certs=/ca", "sentinel",
     (("s1", 26379),), {"tls": True, "service": "m", "username": "u", "password": "p",
                        "options": {"sentinel_password": "sp", "ssl_ca_certs": "/ca"}}),
    ("redis+cluster://n1:7000,n2:7001", "cluster", (("n1", 7000), ("n2", 7001)), {}),
    ("rediss+cluster://n1?ssl_cert_reqs=none", "cluster", (("n1", 6379),),
     {"tls": True, "options": {"ssl_cert_reqs": "none"}}),
])
def test_every_url_form_parses(url: str, kind: str, nodes: tuple[tuple[str, int], ...],
                               extra: dict[str, Any]) -> None:
    target = parse_redis_url(url)
    assert target.kind == kind
    assert target.nodes == nodes
    for name, value in extra.items():
        assert getattr(target, name) == value, name


@pytest.mark.parametrize(("url", "message"), [
    ("http://h", "want one of redis://"),
    ("redis://h:1,h:2", "several hosts need"),
    ("redis://h:0", "bad port"),
    ("redis://h:99999", "bad port"),
    ("redis://h/x", "database number"),
    ("redis://h/1?db=2", "database given twice"),
    ("redis://h?ssl_ca_certs=/ca", "needs TLS (use rediss://)"),
    ("redis+cluster://h?ssl_keyfile=/k", "needs TLS (use rediss+cluster://)"),
    ("redis://h?bogus=1", "unknown option 'bogus'"),
    ("redis://h?ns=fx", "unknown option 'ns'"),
    ("redis://h?db=-1", "db: must be >= 0"),
    ("rediss://h?ssl_cert_reqs=maybe", "want none, optional or required"),
    ("rediss://h?ssl_check_hostname=perhaps", "want true or false"),
    ("unix://host/tmp/s.sock", "names a socket path"),
    ("unix://", "no socket path"),
    ("redis://", "no host"),
    ("redis+sentinel://s1:26379", "Sentinel service name"),
    ("redis+sentinel://s1:26379/a/b", "Sentinel service name"),
    ("redis+sentinel://s1,,s2/m", "empty host"),
    ("redis+cluster://n1:7000/0", "a cluster has no databases"),
    ("redis+cluster://n1?db=1", "unknown option 'db'"),
    ("redis://h?sentinel_password=x", "unknown option 'sentinel_password'"),
    ("redis+cluster://[::1", "IPv6"),
    ("redis://u:p@h?password=q", "password given twice"),
])
def test_bad_urls_are_one_line_value_errors(url: str, message: str) -> None:
    with pytest.raises(ValueError, match="bad Redis URL") as info:
        parse_redis_url(url)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_errors_and_redaction_never_show_passwords() -> None:
    with pytest.raises(ValueError) as info:
        parse_redis_url("redis+sentinel://me:hunter2@s1/m?sentinel_password=topsecret&x=1")
    assert "hunter2" not in str(info.value) and "topsecret" not in str(info.value)
    assert redact("redis://me:hunter2@h:1/0") == "redis://me:***@h:1/0"
    assert redact("unix://:pw@/tmp/s.sock") == "unix://:***@/tmp/s.sock"
    assert redact("redis://h:1") == "redis://h:1"
    assert redact("unix:///s?db=1&password=pw") == "unix:///s?db=1&password=***"


@pytest.mark.parametrize("url", [
    "redis://h:1/2", "rediss://h?ssl_ca_certs=/etc/fluxes/ca.pem", "unix:///tmp/r.sock",
    "redis+sentinel://a:1,b:2/mymaster", "rediss+sentinel://a:1/m?db=2",
    "redis+cluster://n1:7000,n2:7001", "rediss+cluster://n1:7000",
])
def test_instance_uri_takes_every_scheme_and_keeps_ns_apart(url: str) -> None:
    sep = "&" if "?" in url else "?"
    uri = InstanceURI.parse(f"{url}{sep}ns=prod")
    assert uri.ns == "prod"
    assert parse_redis_url(uri.redis_url) == parse_redis_url(url)
    assert InstanceURI.parse(str(uri)) == uri


def test_instance_uri_refuses_other_schemes() -> None:
    with pytest.raises(ValueError, match="not a fluxes URI"):
        InstanceURI.parse("http://u:secret@h/")


# ----------------------------------------------------------------------------- slots (no server)

#: Example values for every parameter name a Keys method takes.
EXAMPLES: dict[str, Callable[[Keys], list[Any]]] = {
    "partition": lambda k: list(range(k.partitions)),
    "jobid": lambda k: [1, 2, 3, 4, 5, 6, 7, 8, 1 << 40, (1 << 40) + 3],
    "rank": lambda k: [0, 1, 17],
    "user": lambda k: ["alice", "bob"],
    "request": lambda k: ["r1", "0123abcd"],
    "owner": lambda k: [0, 1000],
    "digest": lambda k: ["0123456789abcdef0123456789abcdef"],
    "holder": lambda k: ["scheduler@node1", "scheduler-standby@node2"],
    "token": lambda k: ["0123abcd"],
}
NOT_KEYS = {"g", "p", "partition_of", "same_slot", "ns", "partitions", "blob_prefix"}


def every_key(keys: Keys) -> list[str]:
    """One or more example names of every key kind ``Keys`` defines (found by introspection,
    so a key kind added later is covered, or this fails asking for an example value)."""
    names: list[str] = []
    for attr, member in inspect.getmembers(type(keys)):
        if attr.startswith("_") or attr in NOT_KEYS:
            continue
        if isinstance(member, property):
            names.append(getattr(keys, attr))
            continue
        if not callable(member):
            continue
        params = [p for p in inspect.signature(member).parameters if p != "self"]
        missing = [p for p in params if p not in EXAMPLES]
        assert not missing, f"Keys.{attr}: add example values for {missing} to EXAMPLES"
        combos: list[list[Any]] = [[]]
        for param in params:
            combos = [[*c, v] for c in combos for v in EXAMPLES[param](keys)]
        names += [getattr(keys, attr)(*combo) for combo in combos]
    return names


@pytest.mark.parametrize("partitions", [1, 4])
@pytest.mark.parametrize("ns", ["fx", "t"])
def test_same_slot_agrees_with_redis_cluster_key_slots(ns: str, partitions: int) -> None:
    keys = Keys(ns, partitions)
    names = sorted(set(every_key(keys)))
    assert len(names) > 40
    slots = {name: key_slot(name.encode()) for name in names}
    for a in names:
        for b in names:
            assert keys.same_slot(a, b) == (slots[a] == slots[b]), (a, b)
    # the layout the docs promise: one slot per partition plus the global one
    assert len(set(slots.values())) == (1 if partitions == 1 else partitions + 1)
    for jobid in EXAMPLES["jobid"](keys):
        home = keys.journal(keys.partition_of(jobid))
        assert slots[keys.eventlog(jobid)] == slots[keys.job(jobid)] == slots[home]


# ----------------------------------------------------------------------------- servers


def need_binary(name: str) -> str:
    """The path of ``name``; skip without it, except under CI."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed, and CI is set")
        pytest.skip(f"{name} is not installed")
    return path


def free_port(*, with_bus: bool = False) -> int:
    """A loopback TCP port nobody listens on (and port+10000 too, for a cluster bus)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if not with_bus:
            return port
        if port + 10000 < 65536:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair")


@dataclass
class Servers:
    """redis-server processes this test module started, stopped at the end."""

    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, port: int, *args: str, conf: str | None = None,
              sentinel: bool = False) -> int:
        """Start redis-server (or a sentinel) in its own directory; wait for PING."""
        where = self.root / name
        where.mkdir(parents=True, exist_ok=True)
        command = [cast(str, shutil.which("redis-server"))]
        if conf is not None:
            # sentinels rewrite their configuration file: it must be theirs to write
            (where / "server.conf").write_text(conf)
            command.append(str(where / "server.conf"))
        command += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(where),
                    "--logfile", str(where / "log"), "--daemonize", "no", *args]
        if sentinel:
            command.append("--sentinel")
        else:
            command += ["--save", "", "--appendonly", "no"]
        self.procs[name] = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL)
        wait_for(lambda: _pings(port), f"{name} on port {port}", self.procs[name])
        return port

    def kill(self, name: str) -> None:
        """SIGKILL one server (a crash, not a shutdown)."""
        proc = self.procs[name]
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        """Stop every server started here."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _pings(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def wait_for(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes] | None = None,
             timeout: float = 20.0) -> None:
    """Poll ``check`` until true; fail naming ``what`` when it never is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"{what}: not ready within {timeout:g}s")


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    """A place to start servers, cleaned up after the module."""
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-conn-") as tmp:
        started = Servers(Path(tmp))
        try:
            yield started
        finally:
            started.stop()


def sim(runtime: str = "10ms") -> dict[str, Any]:
    return Jobspec.from_command(["true"], cwd="/tmp", attributes={
        "system": {"exec": {"test": {"run_duration": runtime}}}}).to_dict()


def wait_jobs(launcher: Launcher, inst: Instance, ids: list[int], timeout: float = 30.0) -> None:
    """Supervise until every job has a result; fail otherwise."""
    deadline = time.monotonic() + timeout
    left = set(ids)
    while left and time.monotonic() < deadline:
        launcher.supervise_once()
        try:
            for jobid in list(left):
                if inst.redis.hget(inst.keys.job(jobid), "result"):
                    left.discard(jobid)
        except redis.ConnectionError:
            pass  # mid-failover: ask again
        time.sleep(0.1)
    assert not left, f"jobs {sorted(left)} did not finish within {timeout:g}s"


CONTEXTS: dict[str, dict[str, Any]] = {
    "submit": {"urgency": 16, "userid": 1000, "flags": 0, "version": 1},
    "priority": {"priority": 16},
    "urgency": {"urgency": 20, "userid": 1000},
}


def job_batch(keys: Keys, partition: int, jobid: int, expected: int,
              names: list[str], *, fence: str | None = None) -> Batch:
    """A batch appending one job's events, as the job manager and the ingest write them."""
    batch = Batch(keys, partition, fence)
    batch.append(keys.eventlog(jobid), jobid, expected,
                 [ev.decode(name, T, CONTEXTS.get(name)) for name in names])
    return batch


# ----------------------------------------------------------------------------- one server


@system
def test_plain_tcp_unix_and_defaults(servers: Servers) -> None:
    port = servers.start("plain", free_port(), "--unixsocket",
                         str(servers.root / "plain.sock"))
    for url in (f"redis://127.0.0.1:{port}/2", f"unix://{servers.root}/plain.sock?db=2"):
        client = connect(url, client_name="fluxes-test")
        client.set("where", url)
        assert name_of(client) == "fluxes-test"
        # bytes replies, no read timeout (BLPOP/XREAD BLOCK wait long), selected db
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] is None and kwargs["db"] == 2
        assert bool(kwargs.get("socket_keepalive")) == (not url.startswith("unix"))
        assert client.get("where") == url.encode()
        client.close()
    assert redis.Redis(port=port, db=0).get("where") is None


def name_of(client: Any) -> str:
    """The connection's CLIENT SETNAME (redis-py returns str or bytes by version)."""
    name = client.client_getname()
    return name.decode() if isinstance(name, bytes) else str(name)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@system
def test_tls_with_ca_and_client_certificates(servers: Servers) -> None:
    need_binary("openssl")
    pki = servers.root / "pki"
    pki.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
             "-out", "ca.crt", "-days", "1", "-subj", "/CN=fluxes test CA", cwd=pki)
    (pki / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key",
                 "-out", f"{who}.csr", "-subj", f"/CN={who}", cwd=pki)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{who}.crt", "-days", "1",
                 "-extfile", "san.cnf", cwd=pki)
    tls_port = free_port()
    port = servers.start("tls", free_port(), "--tls-port", str(tls_port),
                         "--tls-cert-file", str(pki / "server.crt"),
                         "--tls-key-file", str(pki / "server.key"),
                         "--tls-ca-cert-file", str(pki / "ca.crt"),
                         "--tls-auth-clients", "yes")
    assert port
    # The server demands a client certificate and the client checks the server's
    # against the CA (ssl_cert_reqs=required): a PING proves all four options
    # reached the TLS layer. (Failing cases are left out: redis-py retries a
    # failed TLS connection with backoff for up to a minute.)
    client = connect(f"rediss://127.0.0.1:{tls_port}?ssl_ca_certs={pki}/ca.crt"
                     f"&ssl_certfile={pki}/client.crt&ssl_keyfile={pki}/client.key"
                     "&ssl_cert_reqs=required", client_name="fluxes-tls")
    assert client.ping() and name_of(client) == "fluxes-tls"
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == f"{pki}/ca.crt" and kwargs["ssl_cert_reqs"] == "required"
    client.close()


# ----------------------------------------------------------------------------- Sentinel


@dataclass
class SentinelSet:
    """A primary, its replica and three sentinels watching them as ``service``."""

    servers: Servers
    primary: int
    replica: int
    sentinels: list[int]
    service: str = "fluxes"

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"


@pytest.fixture(scope="module")
def sentinel_set(servers: Servers) -> SentinelSet:
    primary = servers.start("primary", free_port(), "--appendonly", "no")
    replica = servers.start("replica", free_port(), "--replicaof", "127.0.0.1", str(primary))
    sentinels = []
    for i in range(3):
        # fast failure detection so the failover test takes seconds, not a minute
        conf = (f"sentinel monitor fluxes 127.0.0.1 {primary} 2\n"
                "sentinel down-after-milliseconds fluxes 500\n"
                "sentinel failover-timeout fluxes 5000\n")
        sentinels.append(servers.start(f"sentinel{i}", free_port(), conf=conf, sentinel=True))
    found = SentinelSet(servers, primary, replica, sentinels)

    def ready() -> bool:
        link = redis.Redis(port=replica).info("replication").get("master_link_status")
        states = [redis.Redis(port=p).sentinel_master("fluxes") for p in sentinels]
        return link == "up" and all(s["num-other-sentinels"] == 2 and s["num-slaves"] == 1
                                    for s in states)

    wait_for(ready, "replica and sentinels")
    return found


@system
def test_sentinel_url_reaches_the_primary_and_the_event_store_works(
        sentinel_set: SentinelSet) -> None:
    client = connect(sentinel_set.url, client_name="fluxes-sentinel")
    assert client.connection_pool.get_master_address() == ("127.0.0.1", sentinel_set.primary)
    keys = Keys("s")
    store = EventStore(client, keys)
    result = store.commit(job_batch(keys, 0, 1, 0, ["submit", "validate"]))
    assert result.events == 2
    assert [e.event_name for e in store.eventlog(1)] == ["submit", "validate"]
    assert name_of(client) == "fluxes-sentinel"
    client.close()


@system
def test_instance_runs_jobs_through_sentinel_and_survives_failover(
        sentinel_set: SentinelSet) -> None:
    with tempfile.TemporaryDirectory(prefix="fluxes-sent-") as tmp:
        launcher = Launcher(state_dir=Path(tmp), nodes=1, cores_per_node=2,
                            redis_url=sentinel_set.url, namespace="fo")
        uri = launcher.start()
        try:
            inst = Instance.connect(str(uri))
            before = [int(i) for i in Client(inst).submit([{"jobspec": sim()}] * 5)]
            wait_jobs(launcher, inst, before)
            assert inst.redis.wait(1, 5000) == 1  # the replica has everything so far

            sentinel_set.servers.kill("primary")
            started = time.monotonic()
            wait_for(lambda: _pings(sentinel_set.replica) and redis.Redis(
                port=sentinel_set.replica).info("replication")["role"] == "master",
                "failover to the replica", timeout=30)
            promoted = time.monotonic() - started

            # same Instance, same client: it asks the sentinels again after the error
            after: list[int] = []
            deadline = time.monotonic() + 20
            while not after:
                try:
                    after = [int(i) for i in Client(inst).submit([{"jobspec": sim()}] * 5,
                                                                 timeout=10)]
                except (redis.ConnectionError, redis.TimeoutError):
                    assert time.monotonic() < deadline, "no submit after the failover"
                    time.sleep(0.2)
            assert inst.redis.connection_pool.get_master_address() == (
                "127.0.0.1", sentinel_set.replica)
            wait_jobs(launcher, inst, after)
            store = EventStore(inst.redis, inst.keys)
            for jobid in before + after:
                assert store.replay_job(jobid).state.name == "INACTIVE"
            assert promoted < 30
        finally:
            launcher.stop()


# ----------------------------------------------------------------------------- Cluster


@pytest.fixture(scope="module")
def cluster(servers: Servers) -> str:
    """A three-primary cluster; its redis+cluster:// URL (two seeds)."""
    cli = need_binary("redis-cli")
    ports = [free_port(with_bus=True) for _ in range(3)]
    for i, port in enumerate(ports):
        servers.start(f"node{i}", port, "--cluster-enabled", "yes",
                      "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
    subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
                    "--cluster-yes"], check=True, capture_output=True, timeout=60)

    def converged() -> bool:
        infos = [redis.Redis(port=p).cluster("info") for p in ports]
        return all(i["cluster_state"] == "ok" and int(i["cluster_known_nodes"]) == 3
                   for i in infos)

    wait_for(converged, "cluster state ok")
    return f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"


def commit_on(client: Any, batch: Batch, token: str = "") -> CommitResult:
    """``EventStore.commit`` on a cluster client (hot-path calls go to the slot's node)."""
    return EventStore(client, Keys("unused", 1)).commit(batch, token)


@system
def test_cluster_client_and_server_agree_on_every_key_slot(cluster: str) -> None:
    client = connect(cluster)
    assert isinstance(client, redis.RedisCluster)
    node = client.get_random_node().redis_connection
    for partitions in (1, 4):
        names = every_key(Keys("fx", partitions))
        pipe = node.pipeline(transaction=False)
        for name in names:
            pipe.cluster("keyslot", name)
        assert pipe.execute() == [key_slot(n.encode()) for n in names]
    client.close()


@system
@pytest.mark.parametrize("partitions", [1, 4])
def test_event_store_commit_on_cluster_keeps_every_step_in_one_slot(
        cluster: str, partitions: int) -> None:
    client = connect(cluster, client_name="fluxes-cluster")
    keys = Keys(f"c{partitions}", partitions)
    for partition in range(partitions):
        jobid = partition + partitions  # any job of this partition
        token = str(client.incr(keys.jm_fence(partition)))
        client.xgroup_create(keys.jm_new(partition), "jm", id="0", mkstream=True)
        msg = client.xadd(keys.jm_new(partition), {"d": "new"})
        client.xreadgroup("jm", "jm", {keys.jm_new(partition): ">"})

        # the ingest's step (unfenced): create the job, tell the job manager
        created = job_batch(keys, partition, jobid, 0, ["submit", "validate"])
        created.hset(keys.job(jobid), {"jobspec": "{}", "owner": 1000})
        created.xadd(keys.jm_new(partition), {"d": "created"})
        created.set(keys.request_done(partition, "r1"), "done", ttl_ms=60_000)
        if partitions == 1:  # the reply list shares the slot only with one partition
            created.push_reply(keys.reply("alice", "r1"), b"ok", 60_000)
        assert commit_on(client, created).events == 2

        # the job manager's step (fenced): events, messages, acks, checkpoint
        step = job_batch(keys, partition, jobid, 2, ["depend", "priority"])
        step.append(keys.eventlog(jobid), jobid, 4, [ev.decode("urgency", T, CONTEXTS["urgency"])])
        step.journal_only(jobid, ev.decode("annotations", T, {"annotations": {"x": 1}}))
        step.xadd(keys.sched_req(partition), {"d": "alloc"})
        step.xack(keys.jm_new(partition), "jm", [msg])
        step.hdel(keys.job(jobid), ["owner"])
        step.set(keys.checkpoint(partition), b"snapshot")
        result = commit_on(client, step, token)
        assert result.events == 3

        assert len(jobfacts.eventlogs(client, keys, [jobid])[0]) == 5
        assert client.xlen(keys.journal(partition)) == 6
        assert client.xlen(keys.sched_req(partition)) == 1
        assert client.xpending(keys.jm_new(partition), "jm")["pending"] == 0
        assert client.get(keys.checkpoint(partition)) == b"snapshot"
        assert client.hget(keys.job(jobid), "owner") is None

        # a deposed leader writes nothing, on a cluster as anywhere
        client.incr(keys.jm_fence(partition))
        with pytest.raises(FencedError):
            commit_on(client, job_batch(keys, partition, jobid, 5, ["urgency"]), token)
        assert len(jobfacts.eventlogs(client, keys, [jobid])[0]) == 5
    client.close()


@system
def test_cluster_client_refuses_a_step_across_slots(cluster: str) -> None:
    client = connect(cluster)
    keys = Keys("x", 4)
    batch = job_batch(keys, 0, 4, 0, ["submit"])
    batch.push_reply(keys.reply("alice", "r"), b"ok", 1000)  # global slot, not partition 0
    # the server refuses it (CROSSSLOT) before running anything
    with pytest.raises(FluxesError, match="same slot"):
        commit_on(client, batch)
    assert not client.exists(keys.eventlog(4))
    client.close()


@system
def test_event_store_on_a_cluster_commits_replays_and_batches(cluster: str) -> None:
    # EventStore takes parsed XRANGE replies from a cluster client (no single
    # pool) and commits batches one call each (no scripts in cluster pipelines).
    keys = Keys("w")
    store = EventStore(connect(cluster), keys)
    results = store.commit_many([job_batch(keys, 0, jobid, 0, ["submit"]) for jobid in (1, 2)])
    assert [r.events for r in results] == [1, 1]
    replayed = store.replay(0)
    assert sorted(replayed.records) == [1, 2]


@system
def test_reading_every_partition_journal_on_a_cluster(cluster: str) -> None:
    # What `eventlog journal --follow`, `queue drain|idle`, bench and drill do:
    # one read per slot, never one XREAD across slots (which a cluster refuses).
    from fluxes.store.groups import read_streams

    client = connect(cluster)
    keys = Keys("rs", 4)
    for p in range(4):
        client.xadd(keys.journal(p), {"j": str(p), "n": "submit"})
    streams = {keys.journal(p): "0-0" for p in range(4)}
    with pytest.raises(redis.RedisClusterException):
        client.xread(streams, count=10)
    reply = read_streams(client, streams, 10, 100)
    assert sorted(s.decode() if isinstance(s, bytes) else s for s, _e in reply) == \
        sorted(streams)
    client.close()
