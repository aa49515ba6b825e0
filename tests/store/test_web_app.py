"""fluxes web's endpoints against a real redis-server with ACL users: every page and JSON
endpoint, time travel, logins with the users' own Redis identities (so Redis decides
who reads a jobspec or output), sessions across servers, CSRF, and the actions."""

from __future__ import annotations

import re
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis

from fluxes.domain.jm.content import job_content
from fluxes.domain.job import events as ev
from fluxes.formats import jobid as jobids
from fluxes.formats.jobspec import Jobspec
from fluxes.proc.redis_server import RedisServer
from fluxes.store import acl, jobhash
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist_rebuild import rebuild
from fluxes.store.keys import Keys
from fluxes.store.security import user_acl_rules, with_userinfo
from fluxes.web import app as webapp
from fluxes.web.auth import COOKIE

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette would rather have httpx2
    from starlette.testclient import TestClient

pytestmark = pytest.mark.redis

SECRET = "test-secret-of-the-instance-0123456789"
OWNER, OWNER_UID, OWNER_PW = "owner", 4000, "owner-password-0123456789"
USERS = {"alice": (5001, "alice-password-0123456789"), "bob": (5002, "bob-password-012345")}
CONFIG = '[queues.batch]\n[queues.debug]\n[policy.jobspec.defaults.system]\nqueue = "batch"\n'


@pytest.fixture(autouse=True)
def _short_follow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower's blocking read ends the app's shutdown: keep it short."""
    monkeypatch.setattr(webapp, "FOLLOW_BLOCK_MS", 20)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A redis-server of our own: its default user gets a password here."""
    from tests.system.conftest import need_redis

    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-web-") as tmp:
        srv = RedisServer(Path(tmp) / "redis", appendonly=False)
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


@dataclass
class Site:
    """An instance with three jobs: alice's (done, with output), bob's (pending in
    batch), the owner's (running on node0); their times; the server's connection."""

    srv: RedisServer
    admin: redis.Redis
    keys: Keys
    inst: Instance
    ids: dict[str, int]
    t: dict[str, float]

    def app(self, secret: str = SECRET, follow: bool = True) -> Any:
        return webapp.create_app(self.inst, secret, snapshot_every=3, follow=follow)


def _job(store: EventStore, keys: Keys, jobid: int, uid: int, queue: str,
         events: list[ev.Event], extras: list[dict[str, Any] | None], secret: str) -> None:
    spec = Jobspec.from_command(["sh", "-c", "echo $SECRET"]).to_dict()
    spec["attributes"]["system"]["environment"] = {"SECRET": secret}
    spec["attributes"]["system"]["queue"] = queue
    extras = [{**extras[0], "queue": queue}, *extras[1:]] if extras and extras[0] else extras
    batch = store.batch()
    jobhash.create(batch, keys, jobid, owner=uid, urgency=16, queue=queue,
                   content=job_content(orjson.dumps(spec)))
    batch.append(keys.eventlog(jobid), jobid, 0, events, extras)
    store.commit(batch, token="1")


def _life(jobid: int, uid: int, t: float, upto: int) -> tuple[list[ev.Event],
                                                               list[dict[str, Any] | None]]:
    pairs: list[tuple[ev.Event, dict[str, Any] | None]] = [
        (ev.decode("submit", t, {"urgency": 16, "userid": uid, "flags": 0, "version": 1}),
         {"name": f"job{jobid}", "ntasks": 1, "nnodes": 1, "ncores": 2}),
        (ev.decode("validate", t), None), (ev.decode("depend", t + 0.1), None),
        (ev.decode("priority", t + 0.2, {"priority": 16}), None),
        (ev.decode("alloc", t + 10), {"ranks": "0", "nodelist": "node0"}),
        (ev.decode("start", t + 10.1), None), (ev.decode("finish", t + 20, {"status": 0}),
                                               None),
        (ev.decode("release", t + 20, {"ranks": "all", "final": True}), None),
        (ev.decode("free", t + 20.1), None), (ev.decode("clean", t + 20.2), None)]
    return [e for e, _ in pairs[:upto]], [x for _, x in pairs[:upto]]


@pytest.fixture
def site(server: RedisServer) -> Iterator[Site]:
    client = server.client()
    client.flushall()
    for name in acl.users(client) - {"default"}:
        acl.delete_user(client, name)
    acl.protect_default_user(client, OWNER_PW)
    client.close()
    url = with_userinfo(server.url, "default", OWNER_PW)
    admin = redis.Redis(unix_socket_path=str(server.socket), password=OWNER_PW)
    keys = Keys("fx")
    resources = {"config": [{"hosts": "node[0-1]", "cores": "0-3"}]}
    admin.hset(keys.instance, mapping={"partitions": 1, "owner": OWNER, "owner_uid": OWNER_UID,
                                       "config": CONFIG, "resources": orjson.dumps(resources)})
    for name, (uid, password) in USERS.items():
        acl.set_user(admin, name, user_acl_rules(keys, name, uid, password))
        admin.hset(keys.users, name, uid)
    admin.set(keys.jm_fence(0), "1")
    store = EventStore(admin, keys)
    now = time.time()
    ids = {"alice": 1001, "bob": 1002, "owner": 1003}
    t = {"alice": now - 300, "bob": now - 200, "owner": now - 100}
    _job(store, keys, ids["alice"], USERS["alice"][0], "batch",
         *_life(ids["alice"], USERS["alice"][0], t["alice"], 10), "alice-secret")
    _job(store, keys, ids["bob"], USERS["bob"][0], "batch",
         *_life(ids["bob"], USERS["bob"][0], t["bob"], 4), "bob-secret")
    batch = store.batch()
    batch.journal_only(ids["bob"], ev.decode("annotations", t["bob"] + 1, {
        "annotations": {"sched": {"reason_pending": "insufficient resources"}}}))
    store.commit(batch, token="1")
    _job(store, keys, ids["owner"], OWNER_UID, "debug",
         *_life(ids["owner"], OWNER_UID, t["owner"], 6), "owner-secret")
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0-1"}}],
                                     "nodelist": ["node0"]}}
    admin.hset(keys.job(ids["owner"]), "R", orjson.dumps(r))
    for who, uid in (("alice", USERS["alice"][0]), ("owner", OWNER_UID)):
        admin.xadd(keys.output(uid, ids[who]), {"data": f"out-{who}-secret\n",
                                                "stream": "stdout", "rank": "0"})
    admin.set(keys.sched_status, orjson.dumps({"drained": {"1": {"reason": "bad DIMM",
                                                                 "auto": False}}}))
    rebuild(admin, keys)
    inst = Instance(InstanceURI(url, "fx"))
    try:
        yield Site(server, admin, keys, inst, ids, t)
    finally:
        inst.redis.close()
        admin.execute_command("ACL", "SETUSER", "default", "nopass")
        admin.close()


def f58(jobid: int) -> str:
    return jobids.encode(jobid, "f58")


def csrf_of(client: TestClient) -> str:
    token = client.get("/api/whoami").json()["csrf"]
    assert isinstance(token, str)
    return token


def login(client: TestClient, user: str, password: str) -> Any:
    client.get("/login")
    return client.post("/login", data={"user": user, "password": password, "next": "/jobs",
                                       "csrf": csrf_of(client)}, follow_redirects=False)


# ---------------------------------------------------------------- guests and pages


def test_a_guest_gets_every_page_and_public_endpoint(site: Site) -> None:
    with TestClient(site.app()) as client:
        pages = {"/": ["node0", "bad DIMM", "batch"], "/queues": ["batch", "debug"],
                 "/jobs": [f58(site.ids["bob"]), f58(site.ids["owner"])],
                 "/jobs?all=1": [f58(site.ids["alice"])],
                 f"/jobs/{f58(site.ids['bob'])}": ["insufficient resources", "Timeline"],
                 "/gantt": [f58(site.ids["owner"])], "/usage": ["Usage"],
                 "/login": ['name="password"']}
        for path, expected in pages.items():
            response = client.get(path)
            assert response.status_code == 200, path
            assert response.headers["content-type"].startswith("text/html")
            for text in expected:
                assert text in response.text, (path, text)
        assert client.get("/static/fluxes.js").status_code == 200
        assert client.get("/static/fluxes.css").status_code == 200
        assert client.get("/api/whoami").json()["user"] is None
        everyone = client.get("/api/jobs?all=1").json()
        assert {j["id"] for j in everyone["jobs"]} == set(site.ids.values())
        assert [j["id"] for j in client.get("/api/jobs").json()["jobs"]] == \
            [site.ids["owner"], site.ids["bob"]]  # active, newest first
        assert [j["id"] for j in client.get("/api/jobs?all=1&user=alice").json()["jobs"]] == \
            [site.ids["alice"]]
        assert [j["id"] for j in client.get("/api/jobs?queue=debug").json()["jobs"]] == \
            [site.ids["owner"]]
        assert [j["id"] for j in client.get("/api/jobs?states=pending").json()["jobs"]] == \
            [site.ids["bob"]]
        assert [j["id"] for j in
                client.get("/api/jobs?states=completed").json()["jobs"]] == [site.ids["alice"]]
        nodes = client.get("/api/resources").json()["nodes"]
        assert [(n["host"], n["state"], n["cores_used"]) for n in nodes] == \
            [("node0", "partly", 2), ("node1", "drained", 0)]
        assert nodes[1]["reason"] == "bad DIMM"
        assert nodes[0]["jobs"] == [f58(site.ids["owner"])]
        queues = {q["queue"]: q for q in client.get("/api/queues").json()["queues"]}
        assert (queues["batch"]["pending"], queues["debug"]["running"]) == (1, 1)
        assert queues["batch"]["reasons"] == {"insufficient resources": 1}
        bars = client.get("/api/gantt").json()["bars"]
        assert {b["id"] for b in bars} == {site.ids["alice"], site.ids["owner"]}
        usage = client.get("/api/usage").json()
        assert {"usage", "banks", "since", "until"} <= set(usage)
        timeline = client.get("/api/timeline").json()
        assert timeline["first"] == pytest.approx(site.t["alice"])
        steps = client.get(f"/api/steps?at={site.t['alice'] - 1}&n=2").json()["steps"]
        assert [s["name"] for s in steps] == ["submit", "validate"]


def test_a_guest_never_gets_a_jobspec_or_output_even_from_an_owner_server(site: Site) -> None:
    # the server's own identity is the instance owner's: the page must not lend it out
    with TestClient(site.app()) as client:
        for who, jobid in site.ids.items():
            doc = client.get(f"/api/jobs/{f58(jobid)}").json()
            assert doc["jobspec"]["private"] and doc["output"]["private"], who
            page = client.get(f"/jobs/{f58(jobid)}").text
            for response in (orjson.dumps(doc).decode(), page):
                assert f"{who}-secret" not in response
        doc = client.get(f"/api/jobs/{f58(site.ids['bob'])}").json()
        assert doc["pending"]["reason"] == "insufficient resources"
        assert doc["events"][0]["name"] == "submit"
        owner = client.get(f"/api/jobs/{f58(site.ids['owner'])}").json()
        assert owner["R"]["execution"]["nodelist"] == ["node0"]


def test_errors_are_one_line_with_a_status(site: Site) -> None:
    with TestClient(site.app()) as client:
        assert client.get("/api/jobs/nonsense").status_code == 404
        assert client.get(f"/api/jobs/{f58(99)}").status_code == 404
        assert client.get("/jobs/nonsense").status_code == 404
        for path in ("/api/jobs?at=yesterday", "/api/jobs?limit=0", "/api/jobs?queue=nope",
                     "/api/jobs?user=no-such-user-xyz", "/api/jobs?states=bogus",
                     "/api/gantt?start=-1m&end=-2m"):
            response = client.get(path)
            assert response.status_code == 400, path
            assert "\n" not in response.json()["error"]


# ---------------------------------------------------------------- time travel


def test_time_travel_shows_a_job_pending_before_it_ran(site: Site) -> None:
    owner = site.ids["owner"]
    with TestClient(site.app()) as client:
        before = site.t["owner"] + 5  # submitted, not yet allocated
        jobs = {j["id"]: j for j in client.get(f"/api/jobs?all=1&at={before}").json()["jobs"]}
        assert jobs[owner]["state"] == "SCHED"
        assert jobs[site.ids["alice"]]["state"] == "INACTIVE"
        running = client.get(f"/api/jobs?at={site.t['alice'] + 15}").json()["jobs"]
        assert [(j["id"], j["state"]) for j in running] == [(site.ids["alice"], "RUN")]
        assert client.get("/api/jobs").json()["jobs"][0]["state"] == "RUN"
        doc = client.get(f"/api/jobs/{f58(owner)}?at={before}").json()
        assert doc["job"]["state"] == "SCHED"
        assert [e["name"] for e in doc["events"] if not e["future"]] == \
            ["submit", "validate", "depend", "priority"]
        early = client.get(f"/api/jobs?all=1&at={site.t['alice'] - 60}").json()
        assert early["jobs"] == []
        missing = client.get(f"/api/jobs/{f58(owner)}?at={site.t['alice'] - 60}").json()
        assert not missing["exists"]
        nodes = client.get(f"/api/resources?at={site.t['alice'] + 15}").json()["nodes"]
        assert nodes[0]["jobs"] == [f58(site.ids["alice"])]
        page = client.get(f"/jobs?at={before}").text
        assert "as of" in page and f58(owner) in page
        assert client.get(f"/?at={before}").status_code == 200
        assert client.get(f"/gantt?at={before}").status_code == 200
        assert client.get(f"/queues?at={before}").status_code == 200


# ---------------------------------------------------------------- logins


def test_a_login_reads_with_the_users_own_identity(site: Site) -> None:
    with TestClient(site.app()) as client:
        assert login(client, "alice", "wrong").status_code == 401
        assert login(client, "nobody", "x").status_code == 401
        response = login(client, "alice", USERS["alice"][1])
        assert response.status_code == 303 and response.headers["location"] == "/jobs"
        me = client.get("/api/whoami").json()
        assert (me["user"], me["owner"], me["uid"]) == ("alice", False, 5001)
        mine = client.get(f"/api/jobs/{f58(site.ids['alice'])}").json()
        assert mine["jobspec"]["jobspec"]["attributes"]["system"]["environment"] == \
            {"SECRET": "alice-secret"}
        assert [line["data"] for line in mine["output"]["lines"]] == ["out-alice-secret\n"]
        assert "alice-secret" in client.get(f"/jobs/{f58(site.ids['alice'])}").text
        # the owner's job: Redis refuses alice, whatever the server could read
        theirs = client.get(f"/api/jobs/{f58(site.ids['owner'])}").json()
        assert theirs["jobspec"]["private"] and theirs["output"]["private"]
        assert "owner-secret" not in orjson.dumps(theirs).decode()
        page = client.get(f"/jobs/{f58(site.ids['owner'])}").text
        assert "owner-secret" not in page and "cancel-button" not in page
        assert "cancel-button" not in client.get(f"/jobs/{f58(site.ids['bob'])}").text
        client.post("/logout", data={"csrf": csrf_of(client)})
        assert client.get("/api/whoami").json()["user"] is None


def test_the_owner_logs_in_with_the_owners_password_and_reads_everything(site: Site) -> None:
    with TestClient(site.app()) as client:
        assert login(client, OWNER, USERS["alice"][1]).status_code == 401
        assert login(client, OWNER, OWNER_PW).status_code == 303
        me = client.get("/api/whoami").json()
        assert (me["user"], me["owner"]) == (OWNER, True)
        doc = client.get(f"/api/jobs/{f58(site.ids['alice'])}").json()
        assert doc["output"]["lines"][0]["data"] == "out-alice-secret\n"
        page = client.get("/").text
        assert 'id="drain-form"' in page and 'id="undrain-1"' in page
        assert "cancel-button" in client.get(f"/jobs/{f58(site.ids['bob'])}").text
        assert 'id="stop-batch"' in client.get("/queues").text


def test_no_login_where_redis_takes_any_password(site: Site) -> None:
    site.admin.execute_command("ACL", "SETUSER", "default", "nopass")
    try:
        with TestClient(site.app()) as client:
            response = login(client, OWNER, "anything-at-all")
            assert response.status_code == 401
            assert "asks no password" in response.text
            assert client.get("/api/whoami").json()["user"] is None
    finally:
        site.admin.execute_command("ACL", "SETUSER", "default", "resetpass", f">{OWNER_PW}")


def test_a_session_survives_another_server_and_ends_with_the_password(site: Site) -> None:
    with TestClient(site.app()) as first:
        login(first, "alice", USERS["alice"][1])
        cookie = first.cookies[COOKIE]
    with TestClient(site.app(follow=False)) as second:
        second.cookies.set(COOKIE, cookie)
        assert second.get("/api/whoami").json()["user"] == "alice"
        assert not second.get(f"/api/jobs/{f58(site.ids['alice'])}").json()["output"]["private"]
    with TestClient(site.app("another-secret-entirely-0123", follow=False)) as other:
        other.cookies.set(COOKIE, cookie)
        assert other.get("/api/whoami").json()["user"] is None
    # a new password (fluxes admin adduser again) ends the session, also on a server
    # that holds a connection made with the old one
    with TestClient(site.app(follow=False)) as third:
        third.cookies.set(COOKIE, cookie)
        assert third.get("/api/jobs").status_code == 200
        acl.set_user(site.admin, "alice", user_acl_rules(site.keys, "alice", 5001,
                                                         "renewed-0123456"))
        site.admin.execute_command("CLIENT", "KILL", "USER", "alice")  # as deluser does
        codes = [third.get(f"/api/jobs/{f58(site.ids['alice'])}").status_code
                 for _ in range(2)]
        # 401 at once, or after one 503 (the dead connection); then a guest
        assert codes in ([401, 200], [503, 401]), codes
        assert third.get("/api/whoami").json()["user"] is None


# ---------------------------------------------------------------- forms and actions


def _drains(site: Site) -> list[dict[str, Any]]:
    return [orjson.loads(f[b"d"]) for _sid, f in site.admin.xrange(site.keys.resource_events)]


def test_forms_need_the_sessions_csrf_token(site: Site) -> None:
    with TestClient(site.app(follow=False)) as client:
        login(client, OWNER, OWNER_PW)
        for data in ({"targets": "node0"}, {"targets": "node0", "csrf": "forged"}):
            response = client.post("/actions/drain", data=data, follow_redirects=False)
            assert response.status_code == 403
        with TestClient(site.app(follow=False)) as stranger:
            response = stranger.post("/actions/drain", data={"targets": "0", "csrf": "x"})
            assert response.status_code == 403
        assert _drains(site) == []


def test_the_owner_drains_undrains_and_stops_queues(site: Site) -> None:
    with TestClient(site.app(follow=False)) as client:
        login(client, OWNER, OWNER_PW)
        token = csrf_of(client)
        response = client.post("/actions/drain", data={"targets": "node0", "reason": "fan",
                                                       "csrf": token},
                               headers={"referer": "http://testserver/"},
                               follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/"
        page = client.post("/actions/undrain", data={"targets": "1", "csrf": token}).text
        assert "undrain of node1 sent" in page  # said on the page it returns to
        assert "undrain of node1" not in client.get("/").text  # once
        assert [(d["t"], d["ranks"], d["reason"]) for d in _drains(site)] == \
            [("drain", "0", "fan"), ("undrain", "1", "")]
        bad = client.post("/actions/drain", data={"targets": "node7", "csrf": token})
        assert "unknown" in bad.text and len(_drains(site)) == 2
        client.post("/actions/queue", data={"queue": "batch", "kind": "stop",
                                            "reason": "maintenance", "csrf": token})
        [(_sid, fields)] = site.admin.xrange(site.keys.queues)
        event = orjson.loads(fields[b"d"])
        assert (event["kind"], event["queue"], event["reason"]) == ("stop", "batch",
                                                                    "maintenance")
        queues = {q["queue"]: q for q in client.get("/api/queues").json()["queues"]}
        assert not queues["batch"]["started"] and queues["batch"]["stop_reason"] == \
            "maintenance"
        assert client.get("/queues").status_code == 200


def test_users_and_guests_cannot_drain_and_users_cancel_through_their_stream(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webapp, "CANCEL_TIMEOUT_S", 0.05)  # no ingest answers here
    with TestClient(site.app(follow=False)) as client:
        response = client.post("/actions/drain", data={"targets": "0",
                                                       "csrf": csrf_of(client)},
                               follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].startswith(
            "/login")
        login(client, "alice", USERS["alice"][1])
        token = csrf_of(client)
        page = client.post("/actions/drain", data={"targets": "0", "csrf": token}).text
        assert "only the instance owner" in page
        page = client.post("/actions/queue", data={"queue": "batch", "kind": "stop",
                                                   "csrf": token}).text
        assert "only the instance owner" in page
        assert _drains(site) == [] and site.admin.xlen(site.keys.queues) == 0
        client.post("/actions/cancel", data={"jobid": f58(site.ids["bob"]), "csrf": token})
        [(_sid, fields)] = site.admin.xrange(site.keys.submit("alice"))
        request = orjson.loads(fields[b"d"])
        assert (request["t"], request["ids"]) == ("cancel", [site.ids["bob"]])


def test_live_events_arrive_from_the_journal(site: Site) -> None:
    app = site.app()
    with TestClient(app) as client:
        web = app.state.web
        web.index.wait_ready(10)
        with client.stream("GET", f"/api/events?job={f58(2001)}") as response:
            lines = response.iter_lines()
            assert next(lines).startswith("retry:")
            store = EventStore(site.admin, site.keys)
            _job(store, site.keys, 2001, 5001, "batch", *_life(2001, 5001, time.time(), 2),
                 "x")
            _job(store, site.keys, 2002, 5001, "batch", *_life(2002, 5001, time.time(), 2),
                 "x")
            got = []
            for line in lines:
                if line.startswith("data: "):
                    got.append(orjson.loads(line[6:]))
                    if len(got) == 2:
                        break
        assert [(g["id"], g["name"]) for g in got] == [(2001, "submit"), (2001, "validate")]
        assert re.fullmatch(r"ƒ\w+", got[0]["f58"])
