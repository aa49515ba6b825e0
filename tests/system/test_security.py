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
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from fluxes.cli.main import main
from fluxes.formats import jobid as fjobid
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.proc.redis_server import RedisServer
from fluxes.store import acl, jobfacts
from fluxes.store.client import Client
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI, NoInstanceError
from fluxes.store.keys import GROUP_INGEST, Keys
from fluxes.store.security import ENV_CREDENTIALS, load_credentials, url_credentials
from tests import wire
from tests.system.conftest import need_redis
from tests.system.unixusers import need_root_users, useradd, userdel

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


def seed(admin: redis.Redis, keys: Keys, jobid: int = 1234, owner: int = OWNER_UID) -> None:
    """Job data of some job of ``owner``, as the workers would have written it."""
    ctx = orjson.dumps({"urgency": 16, "userid": owner, "flags": 0, "version": 1})
    part = keys.partition_of(jobid)
    admin.xadd(keys.eventlog(jobid), {"n": "submit", "t": "1.0", "c": ctx})
    admin.hset(keys.job(jobid), mapping={"spec": "d1", "owner": owner, "R": "{}"})
    admin.hset(keys.blob(part, owner, "d1"), mapping={"data": "{}", "refs": 1})
    admin.xadd(keys.journal(part), {"j": jobid, "s": 0, "n": "submit", "t": "1.0", "c": ctx})
    admin.xadd(keys.output(owner, jobid), {"stream": "stdout", "data": "hi\n", "rank": "0"})
    admin.hset(keys.joblist_jobs(keys.partition_of(jobid)), str(jobid), "{}")
    admin.sadd(keys.joblist_active(keys.partition_of(jobid)), str(jobid))
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
    seed(admin, keys, 1235, owner=ALICE_UID)
    r = as_user(adduser(server, tmp_path, "alice", ALICE_UID), monkeypatch).redis
    assert r.exists(keys.eventlog(1234)) == 1
    assert len(r.xrange(keys.eventlog(1234))) == 1
    assert r.xrevrange(keys.eventlog(1234), count=1)
    assert r.xlen(keys.journal(0)) == 2
    # a job whose short eventlog index is its hash's field: every reader's command
    # is one a user may send
    sid = admin.xadd(keys.journal(0), {"j": 1236, "s": 0, "n": "submit", "t": "1.0"})
    admin.hset(keys.job(1236), mapping={"owner": OWNER_UID, jobfacts.INDEX_FIELD: sid + b" "})
    assert jobfacts.has_eventlog(r, keys, 1236)
    assert jobfacts.which_exist(r, keys, [1236, 1237]) == [True, False]
    assert jobfacts.eventlog_entries(r, keys, [1236]) == [[(sid, {b"n": b"submit",
                                                                  b"t": b"1.0"})]]
    admin.delete(keys.job(1236))
    admin.xdel(keys.journal(0), sid)
    # her own job's output and jobspec; another's job only what is public
    assert r.xread({keys.output(ALICE_UID, 1235): "0-0", keys.eventlog(1235): "0-0"}, block=10)
    assert r.hget(keys.blob(0, ALICE_UID, "d1"), "data") == b"{}"
    assert refused(lambda: r.xread({keys.output(OWNER_UID, 1234): "0-0"}))
    assert refused(lambda: r.hget(keys.blob(0, OWNER_UID, "d1"), "data"))
    assert r.hgetall(keys.job(1234))[b"R"] == b"{}"
    assert r.hget(keys.job(1234), "owner") == str(OWNER_UID).encode()
    assert r.hmget(keys.joblist_jobs(0), ["1234"]) == [b"{}"]
    assert r.hlen(keys.joblist_jobs(0)) == 2 and r.hvals(keys.joblist_jobs(0)) == [b"{}"] * 2
    assert r.smembers(keys.joblist_active(0)) == {b"1234", b"1235"}
    assert r.zrevrange(keys.joblist_inactive(0), 0, -1) == []
    assert r.hgetall(keys.joblist_counts(0)) == {b"state:RUN": b"1"}
    assert r.hget(keys.instance, "owner") == OWNER.encode()
    assert len(r.xrange(keys.queues)) == 2  # one per seeded job
    assert r.get(keys.sched_status) == b"{}"
    assert r.ping()
    # the CLI's own read paths, as this user
    assert main(["eventlog", "journal"]) == 0
    assert main(["job", "eventlog", "1234"]) == 0
    assert main(["job", "output", "1235"]) == 0
    assert main(["job", "output", "1234"]) == 1  # not hers
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
        lambda: r.xadd(keys.output(OWNER_UID, 1234), {"data": "fake"}),
        lambda: r.xadd(keys.output(ALICE_UID, 1234), {"data": "fake"}),  # read-only, hers too
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

    monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path / "state"))  # the ingest's log
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
    forwarded = [m for _sid, f in admin.xrange(keys.jm_ctl(0)) for m in wire.messages(f)]
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
        assert launcher.uri is not None
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
        # as root, alice is someone else (a root exec worker runs her job as her)
        alice_uid = os.getuid() or pwd.getpwnam("nobody").pw_uid
        assert main(["--uri", uri, "admin", "adduser", "alice", "--uid", "0",
                     "--credentials-dir", str(tmp_path / "creds")]) == 1  # never root
        assert main(["--uri", uri, "admin", "adduser", "alice", "--uid", str(alice_uid),
                     "--credentials-dir", str(tmp_path / "creds")]) == 0
        # alice submits through the workers, as herself, and follows her job
        monkeypatch.setenv(ENV_CREDENTIALS, str(tmp_path / "creds" / "alice.json"))
        capsys.readouterr()
        assert main(["--uri", uri, "submit", "--cwd", "/", "echo", "hello"]) == 0
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


# ------------------------------------------------------------------ the ingest and trimmed entries


def test_ingest_survives_requests_trimmed_while_pending(
        server: RedisServer, admin: redis.Redis, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ACLs cannot stop ``XADD ... MAXLEN 0`` on one's own stream: a request the ingest
    read and had not acknowledged when it died may be gone when it reads it again."""
    from workers.ingest import IngestWorker

    monkeypatch.setenv("FLUXES_STATE_DIR", str(tmp_path / "state"))  # the ingest's log
    keys = setup_instance(admin)
    creds = adduser(server, tmp_path, "alice", ALICE_UID)
    owner = Instance(InstanceURI(server.url, "fx"), client=admin)
    alice = as_user(creds, monkeypatch)
    client = Client(alice)
    client._send([{"t": "submit", "jobs": []}])
    # an ingest reads it (it is now pending for that ingest) and dies
    first = IngestWorker(owner, name="ingest-a")
    first.setup()
    assert admin.xreadgroup(GROUP_INGEST, first.name, {keys.submit("alice"): ">"})
    # alice empties her own stream: her ACL allows it, being an XADD
    alice.redis.xadd(keys.submit("alice"), {"d": "{}"}, maxlen=0, approximate=False)
    assert admin.xlen(keys.submit("alice")) == 0
    assert admin.xpending(keys.submit("alice"), GROUP_INGEST)["pending"] == 1
    again = IngestWorker(owner, name="ingest-a")  # the same ingest, restarted
    again.setup()
    again.step()  # reads its pending entry again: deleted
    assert admin.xpending(keys.submit("alice"), GROUP_INGEST)["pending"] == 0
    [letter] = [f for _id, f in admin.xrange(keys.dead_letters)]
    assert b"trimmed while pending" in letter[b"error"]
    # and she, and everyone else, is served on
    spec = Jobspec.from_command(["true"]).to_dict()
    [reply] = client._send([{"t": "submit", "jobs": [{"jobspec": spec}]}])
    again.step()
    again.step()
    assert "id" in client._wait(reply, 5.0)[0]["jobs"][0]


# ------------------------------------------------------------------ a site with real users
#
# One --require-auth instance for the tests below, with two users. As root they are
# real UNIX users made for the test (removed at the end), and the root exec worker
# runs each job as its owner; otherwise they are ACL users with made-up uids whose
# jobs run as the instance owner (what a non-root exec worker does).


@dataclass
class Site:
    """A running instance with users ``alice`` and ``bob``."""

    launcher: Launcher
    uri: str
    state: Path
    work: Path  # a directory everyone may write to (the jobs' working directory)
    creds: dict[str, Path]
    uids: dict[str, int]
    names: dict[str, str]  # fluxes user -> its name (the UNIX user's, when real)
    real: bool

    def cli(self, who: str, *argv: str) -> int:
        """Run ``fluxes ARGV...`` as ``who`` (alice, bob, or the instance owner)."""
        path = self.launcher.credentials if who == "owner" else self.creds[who]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, str(path))
            return main(["--uri", self.uri, *argv])

    def login(self, who: str) -> redis.Redis:
        """A raw Redis client with ``who``'s credentials."""
        user, password = url_credentials(load_credentials(self.creds[who]).uri)
        return redis.Redis(unix_socket_path=str(self.state / "redis" / "redis.sock"),
                           username=user, password=password, retry=Retry(NoBackoff(), 0))


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    need_redis()
    real = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="fluxes-users-", dir="/tmp"))
    base.chmod(0o711)  # the users pass through to the state directory's socket
    work = base / "work"
    work.mkdir()
    work.chmod(0o1777)
    tag = os.getpid() % 100_000
    names = {"alice": f"fxa{tag}", "bob": f"fxb{tag}"} if real else \
        {"alice": "alice", "bob": "bob"}
    made: list[str] = []
    launcher = None
    try:
        uids = {}
        for who, name in names.items():
            if real:
                uids[who] = useradd(name)
                made.append(name)
            else:
                uids[who] = {"alice": ALICE_UID, "bob": BOB_UID}[who]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, "")
            mp.delenv("FLUXES_URI", raising=False)
            launcher = Launcher(state_dir=base / "state", nodes=1, cores_per_node=2,
                                require_auth=True)
            launcher.start()
            mp.setenv(ENV_CREDENTIALS, str(launcher.credentials))
            creds = {}
            for who, name in names.items():
                argv = ["--uri", str(launcher.uri), "admin", "adduser", name,
                        "--credentials-dir", str(base / "creds")]
                if not real:
                    argv += ["--uid", str(uids[who])]
                assert main(argv) == 0
                creds[who] = base / "creds" / f"{name}.json"
        yield Site(launcher, str(launcher.uri), base / "state", work, creds, uids, names, real)
    finally:
        if launcher is not None:
            launcher.stop()
        for name in made:
            userdel(name)
        shutil.rmtree(base, ignore_errors=True)


def submit(site: Site, who: str, monkeypatch: pytest.MonkeyPatch,
           capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Submit as ``who``; the job id."""
    capsys.readouterr()
    monkeypatch.chdir(site.work)
    assert site.cli(who, "submit", "--cwd", str(site.work), *argv) == 0
    return capsys.readouterr().out.strip()


def attach(site: Site, who: str, jobid: str, capsys: pytest.CaptureFixture[str]
           ) -> tuple[int, str, str]:
    """``fluxes job attach`` as ``who``: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = site.cli(who, "job", "attach", jobid)
    out, err = capsys.readouterr()
    return code, out, err


SECRET = "s3cr3t-token-of-alice"


def test_other_users_jobs_are_private_in_redis_not_only_in_the_cli(
        site: Site, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    jobid = submit(site, "alice", monkeypatch, capsys, "sh", "-c", 'echo "out-$SECRET_TOKEN"')
    monkeypatch.delenv("SECRET_TOKEN")
    assert attach(site, "alice", jobid, capsys) == (0, f"out-{SECRET}\n", "")
    number = str(fjobid.parse(jobid))
    # her own jobspec, environment and output: hers to read
    assert site.cli("alice", "job", "info", jobid, "jobspec") == 0
    assert SECRET in capsys.readouterr().out
    # bob, through the CLI: the public facts yes, the private ones no (one line each)
    assert site.cli("bob", "jobs", "-A", "-a", "-o", "{id} {userid} {state}") == 0
    listed = capsys.readouterr().out
    assert f"{number} {site.uids['alice']} INACTIVE" in listed
    assert site.cli("bob", "job", "eventlog", jobid) == 0
    assert "submit" in capsys.readouterr().out
    assert site.cli("bob", "job", "info", jobid) == 0
    out, err = capsys.readouterr()
    assert f"owner: {site.uids['alice']}" in out and SECRET not in out + err
    assert "private" in err
    for argv in (["job", "info", jobid, "jobspec"], ["job", "info", jobid, "jobspec_full"],
                 ["job", "output", jobid], ["job", "attach", jobid]):
        assert site.cli("bob", *argv) != 0, argv
        out, err = capsys.readouterr()
        assert SECRET not in out + err and len(err.strip().splitlines()) == 1
        assert "private" in err, (argv, err)
    # bob, with raw Redis commands and his credentials: NOPERM on her private keys...
    monkeypatch.setenv(ENV_CREDENTIALS, str(site.launcher.credentials))
    admin = Instance.connect(site.uri)
    keys = admin.keys
    alice_uid = site.uids["alice"]
    private = [admin.keys.output(alice_uid, int(number)),
               *(k.decode() for k in admin.redis.scan_iter(match=f"{{fx}}:blob:{alice_uid}:*"))]
    assert len(private) >= 3  # output, the jobspec and its environment
    r = site.login("bob")
    for key in private:
        for call in (lambda k=key: r.get(k), lambda k=key: r.hget(k, "data"),
                     lambda k=key: r.hgetall(k), lambda k=key: r.xrange(k),
                     lambda k=key: r.xread({k: "0-0"}), lambda k=key: r.exists(k)):
            assert refused(call), key
    # ... and no key he may read holds her secret (whatever its type)
    readable = 0
    for raw in admin.redis.scan_iter(count=1000):
        key = raw.decode()
        kind = admin.redis.type(key).decode()
        read = {"string": lambda k=key: r.get(k), "hash": lambda k=key: r.hgetall(k),
                "stream": lambda k=key: r.xrange(k), "zset": lambda k=key: r.zrange(k, 0, -1),
                "list": None}.get(kind)
        if read is None:
            continue
        try:
            value = read()
        except redis.exceptions.NoPermissionError:
            continue
        readable += 1
        assert SECRET.encode() not in repr(value).encode(), key
    assert readable > 5  # eventlogs, the job hash, journal, read model...
    assert r.hget(keys.job(int(number)), "owner") == str(alice_uid).encode()
    # the instance owner reads it all
    assert site.cli("owner", "job", "info", jobid, "jobspec") == 0
    assert SECRET in capsys.readouterr().out
    assert site.cli("owner", "job", "output", jobid) == 0
    assert capsys.readouterr().out == f"out-{SECRET}\n"


def test_jobs_run_as_their_owners(site: Site, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    need_root_users()
    assert site.real
    a_uid, b_uid = site.uids["alice"], site.uids["bob"]
    creds_file = site.launcher.credentials
    assert creds_file is not None
    password = url_credentials(load_credentials(creds_file).uri)[1]
    assert password
    # each job's tasks run as its owner: uid, group, home; no instance credentials
    probe = 'id -u; id -g; echo "home=$HOME user=$USER"; echo "uri=$FLUXES_URI"; env'
    a_job = submit(site, "alice", monkeypatch, capsys, "sh", "-c", probe)
    b_job = submit(site, "bob", monkeypatch, capsys, "id", "-u")
    code, out, _err = attach(site, "alice", a_job, capsys)
    lines = out.splitlines()
    assert code == 0 and lines[0] == str(a_uid) and lines[1] == str(pwd.getpwuid(a_uid).pw_gid)
    assert f"user={site.names['alice']}" in lines[2]
    assert lines[3].startswith("uri=") and "@" not in lines[3]
    assert password not in out
    assert attach(site, "bob", b_job, capsys)[:2] == (0, f"{b_uid}\n")
    # alice's job runs (its output file in the exec state directory is open)...
    a_long = submit(site, "alice", monkeypatch, capsys, "sh", "-c", "echo a-private; sleep 60")
    a_number = fjobid.parse(a_long)
    user_dir = site.state / "exec" / "rank0" / f"u{a_uid}"
    out_file = user_dir / f"{a_number}.0.out"
    deadline = time.monotonic() + 20
    while not (out_file.exists() and out_file.stat().st_size):
        assert time.monotonic() < deadline, list(site.state.rglob("*"))
        time.sleep(0.05)
    assert out_file.stat().st_uid == a_uid and stat.S_IMODE(out_file.stat().st_mode) == 0o600
    assert user_dir.stat().st_uid == a_uid and stat.S_IMODE(user_dir.stat().st_mode) == 0o700
    # ... and bob's job can neither read it, nor list the state, nor read the owner's
    # credentials file
    snoop = (f'cat {out_file}; echo "cat=$?"; ls {site.state / "exec" / "rank0"}; '
             f'echo "ls=$?"; cat {creds_file}; echo "creds=$?"')
    b_snoop = submit(site, "bob", monkeypatch, capsys, "sh", "-c", snoop)
    code, out, err = attach(site, "bob", b_snoop, capsys)
    assert "a-private" not in out and password not in out + err
    assert "cat=1" in out and "ls=2" in out and "creds=1" in out, (out, err)
    assert err.count("Permission denied") == 3, err
    # nor can alice read the owner's credentials
    a_creds = submit(site, "alice", monkeypatch, capsys, "cat", str(creds_file))
    code, out, err = attach(site, "alice", a_creds, capsys)
    assert code == 1 and password not in out + err and "Permission denied" in err
    # a file output is opened by the job's user, not by root
    a_file = submit(site, "alice", monkeypatch, capsys, "--output",
                    str(site.work / "a-{{id}}.out"), "echo", "to a file")
    assert attach(site, "alice", a_file, capsys)[0] == 0
    written = site.work / f"a-{a_file}.out"
    assert written.read_text() == "to a file\n" and written.stat().st_uid == a_uid
    assert site.cli("alice", "cancel", a_long) == 0
    assert attach(site, "alice", a_long, capsys)[0] != 0


def test_the_python_api_keeps_the_users_rules(site: Site,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``import fluxes as flux`` as a user: their own jobs through the executor and
    the handle, another user's job refused with flux's PermissionError."""
    import fluxes as flux
    from fluxes.job import FluxExecutor, JobspecV1

    def spec(*command: str) -> JobspecV1:
        js = JobspecV1.from_command(list(command))
        js.cwd = str(site.work)
        js.environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        return js

    monkeypatch.chdir(site.work)
    monkeypatch.setenv("FLUXES_URI", site.uri)
    monkeypatch.setenv(ENV_CREDENTIALS, str(site.creds["alice"]))
    with FluxExecutor() as executor:
        assert executor.submit(spec("sh", "-c", "exit 3")).result() == 3
    with flux.Flux() as h:
        jobid = flux.job.submit(h, spec("sleep", "60"), waitable=True)
        monkeypatch.setenv(ENV_CREDENTIALS, str(site.creds["bob"]))
        with flux.Flux() as other:
            with pytest.raises(PermissionError):
                flux.job.cancel(other, jobid)
            listed = flux.job.get_job(other, jobid)
            assert listed is not None and listed["userid"] == site.uids["alice"]
        flux.job.cancel(h, jobid, "done")
        assert flux.job.wait(h) == (jobid, False, b"Fatal exception type=cancel done")


def test_a_root_worker_refuses_unregistered_and_root_jobs(
        site: Site, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """What a root exec worker will not run: a job of a user removed meanwhile (not
    registered any more) fails with the reason, never runs as root."""
    need_root_users()
    jobid = submit(site, "bob", monkeypatch, capsys, "--urgency", "0", "id", "-u")
    assert site.cli("owner", "admin", "deluser", site.names["bob"]) == 0
    try:
        assert site.cli("owner", "job", "urgency", jobid, "16") == 0
        code, out, _err = attach(site, "owner", jobid, capsys)
        assert code != 0 and out == ""
        assert site.cli("owner", "job", "eventlog", jobid) == 0
        assert "is not a registered user" in capsys.readouterr().out
    finally:
        assert site.cli("owner", "admin", "adduser", site.names["bob"], "--credentials-dir",
                        str(site.creds["bob"].parent)) == 0


NOTE = "n0te-only-alice-may-read"


def test_exception_notes_dependencies_and_cwd_are_private(
        site: Site, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    hidden = site.work / NOTE
    hidden.mkdir(exist_ok=True)
    hidden.chmod(0o777)
    held = submit(site, "alice", monkeypatch, capsys, "--urgency=hold", "true")
    waiting = submit(site, "alice", monkeypatch, capsys, "--cwd", str(hidden),
                     f"--dependency=afterany:{held}", "true")
    assert site.cli("alice", "cancel", "--message", NOTE, held) == 0
    monkeypatch.setenv(ENV_CREDENTIALS, str(site.launcher.credentials))
    admin = Instance.connect(site.uri)
    keys = admin.keys
    numbers = [fjobid.parse(held), fjobid.parse(waiting)]
    deadline = time.monotonic() + 60
    while not all(last is not None and last[1][b"n"] == b"clean"
                  for last in jobfacts.last_events(admin.redis, keys, numbers)):
        assert time.monotonic() < deadline, "the jobs did not end"
        time.sleep(0.1)
    capsys.readouterr()
    # alice (and the instance owner) read her note, dependency and cwd back
    for who in ("alice", "owner"):
        assert site.cli(who, "job", "eventlog", held) == 0
        assert NOTE in capsys.readouterr().out
        assert site.cli(who, "job", "eventlog", waiting) == 0
        assert f"after-finish={held}" in capsys.readouterr().out
    assert site.cli("alice", "job", "info", held, "eventlog") == 0
    assert NOTE in capsys.readouterr().out
    assert site.cli("alice", "jobs", "-a", "-o", "{id} {contextual_info}", held) == 0
    assert NOTE in capsys.readouterr().out
    # bob, through the CLI: the events, with stand-ins
    for argv in (["job", "eventlog", held], ["job", "eventlog", waiting],
                 ["job", "info", held, "eventlog"], ["job", "eventlog", "-H", held],
                 ["jobs", "-A", "-a", "-o", "{id} {contextual_info}", held]):
        assert site.cli("bob", *argv) == 0, argv
        out = capsys.readouterr().out
        assert NOTE not in out and "after-finish" not in out, (argv, out)
    assert site.cli("bob", "job", "eventlog", held) == 0
    assert "(private)" in capsys.readouterr().out
    # bob, with raw Redis commands: nothing he may read holds the text
    r = site.login("bob")
    alice_uid = site.uids["alice"]
    for n in numbers:
        assert refused(lambda n=n: r.hgetall(keys.private(0, alice_uid, n)))
        assert admin.redis.exists(keys.private(0, alice_uid, n))
    for text in (repr(jobfacts.eventlogs(r, keys, numbers)).encode(),
                 repr(r.xrange(keys.journal(0))).encode()):
        assert NOTE.encode() not in text and b"after-finish" not in text
        assert b"afterany" not in text
    for raw in admin.redis.scan_iter(count=1000):
        key = raw.decode()
        kind = admin.redis.type(key).decode()
        read = {"string": lambda k=key: r.get(k), "hash": lambda k=key: r.hgetall(k),
                "stream": lambda k=key: r.xrange(k),
                "zset": lambda k=key: r.zrange(k, 0, -1)}.get(kind)
        if read is None:
            continue
        try:
            value = repr(read()).encode()
        except redis.exceptions.NoPermissionError:
            continue
        assert NOTE.encode() not in value and b"afterany" not in value, key
        assert b"after-finish" not in value, key
