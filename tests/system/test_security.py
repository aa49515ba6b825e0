"""Multi-user security against a real redis-server with ACLs.

A private redis-server (unix socket in a temp dir) per module stands for a
site Redis: ``fluxes admin adduser`` creates ACL users there, and the tests
connect as those users to check what Redis lets them do: their own submit
stream and replies, read-only job data, and NOPERM for everything else. The
ingest, driven in-process, shows that who asked comes from the stream, not
from what the request claims. One test runs ``fluxes start --require-auth``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fluxes import messages as proto
from fluxes.cli.main import main
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.proc.redis_server import RedisServer
from fluxes.store import acl
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI, NoInstanceError
from fluxes.store.keys import Keys
from fluxes.store.security import ENV_CREDENTIALS, load_credentials, url_credentials
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

OWNER = "owner"
OWNER_UID = 4000
ALICE_UID = 5001
BOB_UID = 5002


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A redis-server of our own, so ACL users never leak into other tests."""
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-acl-") as tmp:
        srv = RedisServer(Path(tmp) / "redis", appendonly=False)
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


@pytest.fixture
def admin(server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """The owner's client (default user, full access) on a flushed server without users."""
    monkeypatch.setenv(ENV_CREDENTIALS, "")  # never the developer's own credentials
    client = server.client()
    client.flushall()
    for name in acl.users(client) - {"default"}:
        acl.delete_user(client, name)
    yield client
    client.close()


def setup_instance(client: redis.Redis, ns: str = "fx", partitions: int = 1,
                   config: str = "") -> Keys:
    client.hset(Keys(ns).instance, mapping={"partitions": partitions, "owner": OWNER,
                                            "owner_uid": OWNER_UID, "config": config})
    return Keys(ns, partitions)


def uri_of(server: RedisServer, ns: str = "fx") -> str:
    return f"{server.url}?ns={ns}"


def adduser(server: RedisServer, tmp_path: Path, name: str, uid: int,
            ns: str = "fx") -> Path:
    assert main(["--uri", uri_of(server, ns), "admin", "adduser", name, "--uid", str(uid),
                 "--credentials-dir", str(tmp_path / "creds")]) == 0
    return tmp_path / "creds" / f"{name}.json"


def as_user(creds: Path, monkeypatch: pytest.MonkeyPatch) -> Instance:
    """Connect exactly as a user's CLI does: the credentials file through the environment."""
    monkeypatch.setenv(ENV_CREDENTIALS, str(creds))
    monkeypatch.delenv("FLUXES_URI", raising=False)
    return Instance.connect(None, client_name="test-user")


def login(server: RedisServer, creds: Path) -> redis.Redis:
    """A client logged in with a credentials file, without redis-py's retries.

    redis-py retries a failed login like a dropped connection (seconds of
    backoff); a test that expects the login to fail wants the answer at once.
    """
    user, password = url_credentials(load_credentials(creds).uri)
    return redis.Redis(unix_socket_path=str(server.socket), username=user, password=password,
                       retry=Retry(NoBackoff(), 0))


def refused(call: Any) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    return False


# ------------------------------------------------------------------ ACL rules


def seed(admin: redis.Redis, keys: Keys, jobid: int = 1234) -> None:
    """Job data of some job, as the workers would have written it."""
    ctx = orjson.dumps({"urgency": 16, "userid": OWNER_UID, "flags": 0, "version": 1})
    admin.xadd(keys.eventlog(jobid), {"n": "submit", "t": "1.0", "c": ctx})
    admin.hset(keys.job(jobid), mapping={"jobspec": "{}", "owner": OWNER_UID, "R": "{}"})
    admin.xadd(keys.journal(keys.partition_of(jobid)),
               {"j": jobid, "s": 0, "n": "submit", "t": "1.0", "c": ctx})
    admin.xadd(keys.output(jobid), {"stream": "stdout", "data": "hi\n", "rank": "0"})
    admin.hset(keys.joblist_jobs(keys.partition_of(jobid)), str(jobid), "{}")
    admin.zadd(keys.joblist_active(keys.partition_of(jobid)), {str(jobid): 1.0})
    admin.hset(keys.joblist_counts(keys.partition_of(jobid)), "state:RUN", 1)
    admin.xadd(keys.queues, {"d": "{}"})
    admin.set(keys.sched_status, "{}")


def test_user_submits_to_own_stream_and_reads_own_replies(
        server: RedisServer, admin: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = setup_instance(admin)
    creds = adduser(server, tmp_path, "alice", ALICE_UID)
    assert admin.hget(keys.users, "alice") == str(ALICE_UID).encode()
    inst = as_user(creds, monkeypatch)
    client = Client(inst)
    assert inst.user == "alice" and client.user == "alice"
    [reply_key] = client._send([{"t": "submit", "jobs": []}])
    assert admin.xlen(keys.submit("alice")) == 1
    admin.rpush(reply_key, orjson.dumps({"jobs": []}))  # as the ingest answers
    assert client._wait(reply_key, 1.0) == [{"jobs": []}]
    admin.rpush(keys.reply("alice", "x"), b"1")
    assert inst.redis.lpop(keys.reply("alice", "x")) == b"1"
    assert inst.redis.delete(keys.reply("alice", "y")) == 0


def test_user_reads_job_data_and_read_model(server: RedisServer, admin: redis.Redis,
                                            tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    keys = setup_instance(admin)
    seed(admin, keys)
    r = as_user(adduser(server, tmp_path, "alice", ALICE_UID), monkeypatch).redis
    assert r.exists(keys.eventlog(1234)) == 1
    assert len(r.xrange(keys.eventlog(1234))) == 1
    assert r.xrevrange(keys.eventlog(1234), count=1)
    assert r.xlen(keys.journal(0)) == 1
    assert r.xread({keys.output(1234): "0-0", keys.eventlog(1234): "0-0"}, block=10)
    assert r.hgetall(keys.job(1234))[b"R"] == b"{}"
    assert r.hget(keys.job(1234), "owner") == str(OWNER_UID).encode()
    assert r.hmget(keys.joblist_jobs(0), ["1234"]) == [b"{}"]
    assert r.hlen(keys.joblist_jobs(0)) == 1 and r.hvals(keys.joblist_jobs(0)) == [b"{}"]
    assert r.zrange(keys.joblist_active(0), 0, -1) == [b"1234"]
    assert r.zrevrange(keys.joblist_inactive(0), 0, -1) == []
    assert r.hgetall(keys.joblist_counts(0)) == {b"state:RUN": b"1"}
    assert r.hget(keys.instance, "owner") == OWNER.encode()
    assert len(r.xrange(keys.queues)) == 1
    assert r.get(keys.sched_status) == b"{}"
    assert r.ping()
    # the CLI's own read paths, as this user
    assert main(["eventlog", "journal"]) == 0
    assert main(["job", "eventlog", "1234"]) == 0
    assert main(["job", "output", "1234"]) == 0
    assert main(["jobs", "-A", "--stats-only"]) == 0


def test_user_is_refused_everything_else(server: RedisServer, admin: redis.Redis,
                                         tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    keys = setup_instance(admin)
    seed(admin, keys)
    adduser(server, tmp_path, "bob", BOB_UID)
    r = as_user(adduser(server, tmp_path, "alice", ALICE_UID), monkeypatch).redis
    admin.rpush(keys.reply("bob", "r1"), b"secret")
    writes = [
        lambda: r.xadd(keys.eventlog(1234), {"n": "exception", "t": "2.0"}),
        lambda: r.xadd(keys.eventlog(999), {"n": "submit", "t": "2.0"}),
        lambda: r.hset(keys.job(1234), "R", "{}"),
        lambda: r.hset(keys.job(1234), "owner", ALICE_UID),
        lambda: r.delete(keys.job(1234)),
        lambda: r.xadd(keys.journal(0), {"j": 1, "n": "clean"}),
        lambda: r.xadd(keys.queues, {"d": "{}"}),
        lambda: r.xadd(keys.sched_req(0), {"d": "{}"}),
        lambda: r.xadd(keys.sched_resp(0), {"d": "{}"}),
        lambda: r.set(keys.sched_status, "{}"),
        lambda: r.xadd(keys.jm_ctl(0), {"d": "{}"}),
        lambda: r.xadd(keys.jm_new(0), {"d": "{}"}),
        lambda: r.xadd(keys.exec_rank(0), {"d": "{}"}),
        lambda: r.xadd(keys.exec_events(0), {"d": "{}"}),
        lambda: r.xadd(keys.output(1234), {"data": "fake"}),
        lambda: r.set(keys.checkpoint(0), "x"),
        lambda: r.hset(keys.joblist_jobs(0), "1", "{}"),
        lambda: r.hset(keys.users, "alice", 0),
        lambda: r.hset(keys.instance, "owner_uid", ALICE_UID),
        lambda: r.set(keys.jm_fence(0), 99),
        lambda: r.xadd(keys.submit("bob"), {"d": "{}"}),
        lambda: r.xadd(keys.submit(OWNER), {"d": "{}"}),
        lambda: r.rpush(keys.reply("alice", "x"), "forged"),
        lambda: r.delete(keys.submit("alice")),  # would break the ingest's group
        lambda: r.xgroup_create(keys.submit("alice"), "g", mkstream=True),
        lambda: r.xtrim(keys.submit("alice"), 0),
    ]
    reads = [
        lambda: r.lpop(keys.reply("bob", "r1")),
        lambda: r.blpop([keys.reply("bob", "r1")], timeout=0.01),
        lambda: r.delete(keys.reply("bob", "r1")),
        lambda: r.xrange(keys.submit("bob")),
        lambda: r.hgetall(keys.users),
        lambda: r.hgetall(keys.workers),
        lambda: r.get(keys.checkpoint(0)),
        lambda: r.xrange(keys.sched_req(0)),
        lambda: r.xrange(keys.dead_letters),
        lambda: r.keys("*"),
        r.flushall,
        lambda: r.config_get("*"),
        r.acl_list,
        lambda: r.eval("return 1", 0),
        lambda: r.xreadgroup("ingest", "me", {keys.submit("alice"): ">"}),
    ]
    for i, call in enumerate(writes + reads):
        assert refused(call), f"call {i} was allowed"
    assert admin.lrange(keys.reply("bob", "r1"), 0, -1) == [b"secret"]
    assert admin.xlen(keys.eventlog(1234)) == 1
    # a user cannot manage users either
    assert main(["admin", "adduser", "mallory", "--uid", "7", "--credentials-dir",
                 str(tmp_path / "m")]) == 1
    assert not (tmp_path / "m" / "mallory.json").exists()


def test_patterns_escape_the_namespace_and_cover_every_partition(
        server: RedisServer, admin: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    keys = setup_instance(admin, ns="a*", partitions=3)
    other = setup_instance(admin, ns="ab", partitions=3)
    for jobid in (30, 31, 32):
        seed(admin, keys, jobid)
        seed(admin, other, jobid)
    r = as_user(adduser(server, tmp_path, "alice", ALICE_UID, ns="a*"), monkeypatch).redis
    for jobid in (30, 31, 32):
        part = keys.partition_of(jobid)
        assert r.xlen(keys.journal(part)) == 1 and r.exists(keys.eventlog(jobid))
        assert refused(lambda p=part: r.xlen(other.journal(p)))
        assert refused(lambda j=jobid: r.exists(other.eventlog(j)))
    assert refused(lambda: r.hget(other.instance, "owner"))
    assert r.xadd(keys.submit("alice"), {"d": "{}"})
    assert refused(lambda: r.xadd(other.submit("alice"), {"d": "{}"}))


def test_deluser_revokes_access(server: RedisServer, admin: redis.Redis, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    keys = setup_instance(admin)
    creds = adduser(server, tmp_path, "alice", ALICE_UID)
    inst = as_user(creds, monkeypatch)
    assert inst.redis.ping()
    logged_in = login(server, creds)
    assert logged_in.ping()
    monkeypatch.setenv(ENV_CREDENTIALS, "")
    assert main(["--uri", uri_of(server), "admin", "users", "--json"]) == 0
    users = orjson.loads(capsys.readouterr().out.splitlines()[-1])["users"]
    assert {"name": "alice", "uid": ALICE_UID, "acl": True, "owner": False} in users
    assert main(["--uri", uri_of(server), "admin", "deluser", "alice"]) == 0
    assert admin.hget(keys.users, "alice") is None
    assert acl.users(admin) == {"default"}
    # the open connection is closed by Redis, and a new one cannot log in
    with pytest.raises(redis.ConnectionError):
        logged_in.ping()
    with pytest.raises(redis.AuthenticationError):
        login(server, creds).ping()
    assert main(["--uri", uri_of(server), "admin", "deluser", "alice"]) == 1
    assert "no user 'alice'" in capsys.readouterr().err


def test_credentials_file_is_private(server: RedisServer, admin: redis.Redis,
                                     tmp_path: Path) -> None:
    setup_instance(admin)
    creds = adduser(server, tmp_path, "alice", ALICE_UID)
    st = creds.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(creds.parent.stat().st_mode) == 0o700
    if os.geteuid() == 0:
        assert st.st_uid == ALICE_UID and creds.parent.stat().st_uid == ALICE_UID
    loaded = load_credentials(creds)
    assert loaded.user == "alice" and "alice:" in loaded.uri and loaded.uri.endswith("ns=fx")
    # a second adduser renews the password: the old one stops working
    old = tmp_path / "old.json"
    old.write_bytes(creds.read_bytes())
    old.chmod(0o600)
    adduser(server, tmp_path, "alice", ALICE_UID)
    with pytest.raises(redis.AuthenticationError):
        login(server, old).ping()
    assert login(server, creds).ping()


def test_adduser_refuses_bad_names_and_the_owner(server: RedisServer, admin: redis.Redis,
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    setup_instance(admin)
    for name in ("default", OWNER, "a:b", "x*", "{fx}", ""):
        assert main(["--uri", uri_of(server), "admin", "adduser", name, "--uid", "9",
                     "--credentials-dir", str(tmp_path)]) == 1, name
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert acl.users(admin) == {"default"}


# ------------------------------------------------------------------ the ingest trusts the stream


def test_ingest_takes_the_user_from_the_stream_not_the_request(
        server: RedisServer, admin: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.ingest import IngestWorker
    from workers.jobmanager import JobManagerWorker

    keys = setup_instance(admin, config='[policy]\njobspec.defaults.system.queue = "batch"\n'
                                         '[queues.batch]\n[queues.private]\n'
                                         'policy.access.allow-user = ["alice"]\n')
    alice_creds = adduser(server, tmp_path, "alice", ALICE_UID)
    bob_creds = adduser(server, tmp_path, "bob", BOB_UID)
    owner = Instance(InstanceURI(server.url, "fx"), client=admin)
    ingest = IngestWorker(owner)
    ingest.setup()
    jm = JobManagerWorker(owner)
    jm.setup()
    jm.step()  # becomes the partition leader
    spec = Jobspec.from_command(["true"]).to_dict()

    def ask(creds: Path, request: dict[str, Any]) -> dict[str, Any]:
        client = Client(as_user(creds, monkeypatch))
        [reply] = client._send([request])
        ingest.step()
        jm.step()
        return client._wait(reply, 5.0)[0]

    [alice_job] = [r["id"] for r in ask(alice_creds, {"t": "submit",
                                                      "jobs": [{"jobspec": spec}]})["jobs"]]
    # bob claims to be alice, in every way a request could
    claim = {"user": "alice", "userid": ALICE_UID, "owner": ALICE_UID, "username": "alice"}
    answer = ask(bob_creds, {"t": "submit", **claim, "jobs": [{"jobspec": spec, **claim}]})
    assert "id" in answer["jobs"][0], answer
    bob_job = answer["jobs"][0]["id"]
    assert admin.hget(keys.job(bob_job), "owner") == str(BOB_UID).encode()
    submit = EventStore(admin, keys).eventlog(bob_job)[0]
    assert submit.event_name == "submit" and submit.context()["userid"] == BOB_UID
    # ... which does not get him into alice's queue
    private = Jobspec.from_command(["true"], queue="private").to_dict()
    answer = ask(bob_creds, {"t": "submit", **claim, "jobs": [{"jobspec": private}]})
    assert "not allowed" in answer["jobs"][0]["error"]
    assert "id" in ask(alice_creds, {"t": "submit", "jobs": [{"jobspec": private}]})["jobs"][0]
    # ... nor lets him cancel her job
    answer = ask(bob_creds, {"t": "cancel", "ids": [alice_job], **claim})
    assert answer.get("ok") in (None, []) and answer["errors"]
    forwarded = [m for _sid, f in admin.xrange(keys.jm_ctl(0)) for m in proto.decode(f)[1]]
    assert forwarded and all(m["userid"] == BOB_UID for m in forwarded)
    assert "exception" not in [e.event_name for e in EventStore(admin, keys).eventlog(alice_job)]
    # alice herself may
    answer = ask(alice_creds, {"t": "cancel", "ids": [alice_job]})
    assert answer["ok"] == [alice_job]


# ------------------------------------------------------------------ fluxes start --require-auth


def test_require_auth_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    need_redis()
    monkeypatch.setenv(ENV_CREDENTIALS, "")
    monkeypatch.delenv("FLUXES_URI", raising=False)
    state = tmp_path / "state"
    launcher = Launcher(state_dir=state, nodes=1, cores_per_node=2, require_auth=True)
    launcher.start()
    try:
        uri = str(launcher.uri)
        assert launcher.credentials == state / "credentials.json"
        assert "@" not in uri  # no password on worker command lines
        assert stat.S_IMODE(launcher.credentials.stat().st_mode) == 0o600
        assert stat.S_IMODE((state / "redis" / "redis.sock").stat().st_mode) == 0o777
        assert stat.S_IMODE(state.stat().st_mode) == 0o711
        assert stat.S_IMODE((state / "logs").stat().st_mode) == 0o700
        # no credentials, no entry; the message says where credentials come from
        stranger = redis.Redis(unix_socket_path=str(state / "redis" / "redis.sock"),
                               retry=Retry(NoBackoff(), 0))
        with pytest.raises(NoInstanceError, match=ENV_CREDENTIALS):
            Instance(launcher.uri, client=stranger)
        monkeypatch.setenv(ENV_CREDENTIALS, str(launcher.credentials))
        assert main(["--uri", uri, "admin", "adduser", "alice", "--uid", str(os.getuid()),
                     "--credentials-dir", str(tmp_path / "creds")]) == 0
        # alice submits through the workers, as herself, and follows her job
        monkeypatch.setenv(ENV_CREDENTIALS, str(tmp_path / "creds" / "alice.json"))
        capsys.readouterr()
        assert main(["--uri", uri, "submit", "echo", "hello"]) == 0
        jobid = capsys.readouterr().out.strip()
        assert main(["--uri", uri, "job", "attach", jobid]) == 0
        assert capsys.readouterr().out == "hello\n"
        assert main(["--uri", uri, "queue", "stop", "--all"]) == 1
    finally:
        launcher.stop()
    # a restart keeps the users and the owner's password
    monkeypatch.setenv(ENV_CREDENTIALS, str(launcher.credentials))
    again = Launcher(state_dir=state, nodes=1, cores_per_node=2, require_auth=True)
    again.start()
    try:
        inst = Instance.connect(str(again.uri))
        assert inst.redis.hget(inst.keys.users, "alice")
        monkeypatch.setenv(ENV_CREDENTIALS, str(tmp_path / "creds" / "alice.json"))
        alice = Instance.connect(str(again.uri))
        assert alice.user == "alice" and alice.redis.ping()
    finally:
        again.stop()
