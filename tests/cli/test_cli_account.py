"""``fluxes account``, ``fluxes job priority`` and ``fluxes admin rebuild-accounting`` on an
in-process instance (fakeredis)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from fluxes.cli.main import main
from fluxes.domain.job import events as ev
from fluxes.store.eventstore import EventStore
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.joblist_rebuild import rebuild as rebuild_joblist
from fluxes.store.keys import Keys

KEYS = Keys("t")
T = 1000.0


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, fake_redis: redis.Redis) -> Iterator[redis.Redis]:
    """Every command of the test talks to one fakeredis instance, as its owner."""
    fake_redis.hset(KEYS.instance, mapping={"owner": "root", "owner_uid": 0,
                                            "config": '[accounting]\nhalf-life = "0"\n'})
    user = {"name": None}

    def connect(cls: type[Instance], uri: str | None = None,
                client_name: str | None = None, lite: bool = False) -> Instance:
        return Instance(InstanceURI("redis://unused", "t"), client=fake_redis,
                        user=user["name"])

    monkeypatch.setattr(Instance, "connect", classmethod(connect))
    fake_redis.user_switch = user
    yield fake_redis


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    return out


def setup_banks(capsys: pytest.CaptureFixture[str]) -> None:
    ok(capsys, "account", "add-bank", "root", "1")
    ok(capsys, "account", "add-bank", "--parent-bank=root", "physics", "3",
       "--max-running-jobs=10")
    ok(capsys, "account", "add-bank", "--parent-bank=root", "chem", "1")
    ok(capsys, "account", "add-user", "--username=alice", "--userid=1001", "--bank=physics")
    ok(capsys, "account", "add-user", "--username=alice", "--userid=1001", "--bank=chem",
       "--shares=2")
    ok(capsys, "account", "add-user", "--username=bob", "--userid=1002", "--bank=chem",
       "--max-running-jobs=4", "--max-active-jobs=8")


def test_banks_and_users_as_flux_account_shows_them(client: redis.Redis,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    banks = orjson.loads(ok(capsys, "account", "list-banks", "--json"))["banks"]
    assert [(b["bank"], b["parent_bank"], b["shares"]) for b in banks] == \
        [("root", None, 1), ("chem", "root", 1), ("physics", "root", 3)]
    assert banks[2]["limits"]["max_running_jobs"] == 10
    alice = orjson.loads(ok(capsys, "account", "view-user", "alice", "--json"))
    assert alice["default_bank"] == "physics"
    assert [(a["bank"], a["shares"]) for a in alice["associations"]] == \
        [("chem", 2), ("physics", 1)]
    text = ok(capsys, "account", "list-users")
    assert text.splitlines()[0].split() == ["USERNAME", "UID", "BANK", "SHARES", "MAX-RUN",
                                            "MAX-ACTIVE", "MAX-NODES", "MAX-CORES"]
    assert ["bob", "1002", "chem*", "1", "4", "8", "-", "-"] in \
        [line.split() for line in text.splitlines()]
    tree = ok(capsys, "account", "view-bank", "root", "-t").splitlines()
    assert [line.split()[0] for line in tree[1:]] == ["root", "chem", "physics"]
    assert tree[2].startswith("  chem")
    members = ok(capsys, "account", "view-bank", "chem", "-u")
    assert "alice" in members and "bob" in members
    ok(capsys, "account", "edit-user", "alice", "--default-bank=chem", "--max-nodes=3")
    alice = orjson.loads(ok(capsys, "account", "view-user", "alice", "--json"))
    assert alice["default_bank"] == "chem"
    assert {a["limits"]["max_nodes"] for a in alice["associations"]} == {3}
    ok(capsys, "account", "edit-user", "alice", "--max-nodes=-1")
    ok(capsys, "account", "delete-user", "bob", "chem")
    ok(capsys, "account", "edit-bank", "physics", "--shares=5")
    ok(capsys, "account", "delete-bank", "physics")
    banks = orjson.loads(ok(capsys, "account", "list-banks", "--inactive", "--json"))["banks"]
    assert [(b["bank"], b["active"]) for b in banks] == \
        [("root", True), ("chem", True), ("physics", False)]


@pytest.mark.parametrize(("argv", "message"), [
    (["add-bank", "other", "1"], "bank root is the root bank already: give --parent-bank"),
    (["add-bank", "--parent-bank=nope", "x", "1"], "no bank 'nope'"),
    (["add-bank", "--parent-bank=root", "x", "-2"], "shares: expected an integer"),
    (["add-user", "--username=zz-no-such-user-zz", "--bank=root"], "give --userid"),
    (["add-user", "--username=alice", "--userid=7", "--bank=root"],
     "user alice has uid 1001, not 7"),
    (["delete-user", "alice", "nope"], "user alice is not in bank nope"),
    (["edit-bank", "chem"], "nothing to change"),
    (["edit-user", "alice", "--max-cores=-5"], "--max-cores: expected a count or -1"),
    (["view-user", "nobody"], "no user nobody"),
    (["view-bank", "nope"], "no bank 'nope'"),
])
def test_mistakes_are_one_line(client: redis.Redis, capsys: pytest.CaptureFixture[str],
                               argv: list[str], message: str) -> None:
    setup_banks(capsys)
    count = client.xlen(KEYS.accounting)
    code, _out, err = run(capsys, "account", *argv)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1
    assert client.xlen(KEYS.accounting) == count  # nothing written


def test_only_the_owner_changes_accounting(client: redis.Redis,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    client.user_switch["name"] = "mallory"
    code, _out, err = run(capsys, "account", "add-bank", "root", "1")
    assert code != 0 and "only the instance owner can change accounting" in err
    assert client.xlen(KEYS.accounting) == 0
    assert orjson.loads(ok(capsys, "account", "list-banks", "--json")) == {"banks": []}


def write_job(client: redis.Redis, jobid: int, uid: int, t_alloc: float, t_free: float | None,
              bank: str = "", ncores: int = 2, queue: str = "", project: str = "",
              duration: float = 0.0) -> None:
    """A job through its life: allocated at t_alloc, freed at t_free (None: running)."""
    store = EventStore(client, KEYS)
    client.set(KEYS.jm_fence(0), "1")
    batch = store.batch()
    extra: dict[str, Any] = {"name": "j", "ncores": ncores, "nnodes": 1, "ngpus": 0,
                             "duration": duration}
    if bank:
        extra["bank"] = bank
    if queue:
        extra["queue"] = queue
    if project:
        extra["project"] = project
    batch.append(KEYS.eventlog(jobid), jobid, 0, [
        ev.decode("submit", T, {"urgency": 16, "userid": uid, "flags": 0, "version": 1}),
        ev.decode("validate", T)], [extra, None])
    store.commit(batch)
    life: list[tuple[str, float, dict[str, Any]]] = [
        ("depend", T, {}), ("priority", T, {"priority": 16}), ("alloc", t_alloc, {})]
    if t_free is not None:
        life += [("start", t_alloc, {}), ("finish", t_free, {"status": 0}),
                 ("release", t_free, {"ranks": "all", "final": True}), ("free", t_free, {}),
                 ("clean", t_free, {})]
    batch = store.batch()
    batch.append(KEYS.eventlog(jobid), jobid, 2, [ev.decode(n, t, c) for n, t, c in life],
                 [{"ranks": "0"} if n == "alloc" else None for n, _t, _c in life])
    store.commit(batch, token="1")


def test_usage_over_a_period_as_json_csv_and_text(client: redis.Redis,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110, bank="physics")
    write_job(client, 2, 1001, T + 50, T + 60, bank="chem", ncores=1)
    write_job(client, 3, 1002, T + 100, None)  # bob, still running
    rebuilt = orjson.loads(ok(capsys, "admin", "rebuild-accounting", "--json"))
    assert rebuilt["partitions"][0]["associations"] == 2
    report = orjson.loads(ok(capsys, "account", "usage", f"--since={T}",
                             f"--until={T + 60}", "--json"))
    rows = {(r["user"], r["bank"]): r for r in report["usage"]}
    assert rows[("alice", "physics")]["core_seconds"] == 100.0  # 2 cores, 10..60
    assert rows[("alice", "chem")]["core_seconds"] == 10.0
    assert rows[("alice", "physics")]["jobs"] == 1
    assert ("bob", "chem") not in rows  # allocated after the period
    assert {b["bank"]: b["core_seconds"] for b in report["banks"]} == \
        {"root": 110.0, "physics": 100.0, "chem": 10.0}
    assert set(rows[("alice", "chem")]) >= {"core_seconds", "gpu_seconds", "node_seconds",
                                            "jobs"}
    table = list(csv.reader(io.StringIO(ok(capsys, "account", "usage", f"--since={T}",
                                           f"--until={T + 60}", "--csv"))))
    assert table[0] == ["user", "userid", "bank", "jobs", "core_seconds", "gpu_seconds",
                        "node_seconds"]
    assert ["alice", "1001", "physics", "1", "100.0", "0.0", "50.0"] in table
    text = ok(capsys, "account", "usage")
    assert "bob" in text.split() and text.splitlines()[0].split()[:3] == ["USER", "BANK",
                                                                         "JOBS"]
    code, _out, err = run(capsys, "account", "usage", "--since=-1h", f"--until={T}")
    assert code != 0 and "--until is before --since" in err


def test_share_and_job_priority_show_the_factors(client: redis.Redis,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110)
    write_job(client, 2, 1002, T + 10, T + 20, bank="chem")
    ok(capsys, "admin", "rebuild-accounting")
    share = orjson.loads(ok(capsys, "account", "share", "--json"))
    rows = {(r["kind"], r["name"], r["bank"]): r for r in share["rows"]}
    assert share["total_usage"] == 220.0  # no decay in this instance
    assert rows[("bank", "physics", "root")]["norm_usage"] == pytest.approx(200 / 220)
    alice = rows[("user", "alice", "physics")]
    assert alice["fairshare"] == pytest.approx(2 ** (-(200 / 220) / 0.75))
    text = ok(capsys, "account", "share")
    assert "FAIRSHARE" in text.splitlines()[0] and "alice" in text
    rebuild_joblist(client, KEYS)
    shown = orjson.loads(ok(capsys, "job", "priority", "1", "--json"))
    assert shown["factors"]["fairshare"]["factor"] == pytest.approx(alice["fairshare"])
    assert shown["factors"]["urgency"]["factor"] == pytest.approx(16 / 31)
    assert shown["plugin"] == "default" and shown["job_priority"] == 16
    # one number for the job's priority: the eventlog's last priority event, the
    # job list's (jobs -o {priority}) and job priority's headline; the plugin's
    # value computed now is named apart
    assert shown["priority"] == 16 and shown["computed_now"] != 16
    assert ok(capsys, "jobs", "-n", "-o", "{priority}", "1").split() == ["16"]
    text = ok(capsys, "job", "priority", "1")
    assert text.splitlines()[0].split()[2:4] == ["priority", "16"]
    assert f"computed now: multi-factor priority {shown['computed_now']}" in text
    assert text.splitlines()[2].split() == ["FACTOR", "VALUE", "WEIGHT", "PRIORITY"]
    assert "default priority plugin" in text
    code, _out, err = run(capsys, "job", "priority", "99")
    assert code != 0 and "job 99 not found" in err


def test_share_before_any_bank(client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no banks yet" in ok(capsys, "account", "share")


def test_jobs_history_filters_and_csv_as_sacct_users_want(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110, bank="physics")
    write_job(client, 2, 1001, T + 50, T + 60, bank="chem")
    write_job(client, 3, 1002, T + 100, None, bank="chem")  # still running
    rebuild_joblist(client, KEYS)

    def ids(*argv: str) -> list[str]:
        who = () if "-u" in argv else ("-A",)
        rows = list(csv.reader(io.StringIO(ok(capsys, "jobs", *who, "--csv", "-o",
                                              "{id.dec},{bank},{userid}", *argv))))
        assert rows[0] == ["JOBID", "BANK", "UID"]
        return sorted(r[0] for r in rows[1:])

    assert ids("-a") == ["1", "2", "3"]
    assert ids("--bank=chem", "-a") == ["2", "3"]
    assert ids("-u", "1001", "-a") == ["1", "2"]
    # --since implies -a: jobs ended before it are left out, running ones stay
    assert ids(f"--since={T + 100}") == ["1", "3"]
    assert ids(f"--since={T + 200}") == ["3"]
    assert ids("-a", f"--until={T}") == []  # every job was submitted at T
    assert ids("-a", f"--until={T + 1}") == ["1", "2", "3"]
    assert ids("-f", "completed", "--bank=chem") == ["2"]
    table = list(csv.reader(io.StringIO(ok(capsys, "jobs", "-A", "-a", "--csv"))))
    # every column, even one empty for all (a script reads the same columns each time)
    assert table[0][:5] == ["JOBID", "USER", "BANK", "QUEUE", "NAME"]
    assert len(table) == 4 and all(len(row) == len(table[0]) for row in table)
    rows = {row[table[0].index("BANK")] + row[table[0].index("STATUS")] for row in table[1:]}
    assert rows == {"physicsCOMPLETED", "chemCOMPLETED", "chemRUN"}
    code, _out, err = run(capsys, "jobs", "--since=yesterday")
    assert code == 2 and "invalid time" in err
    code, _out, err = run(capsys, "jobs", "--csv", "--json")
    assert code == 2 and "cannot be combined" in err


def test_view_job_records_filters_as_flux_accounting(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110)  # alice, before any bank: no bank
    write_job(client, 2, 1001, T + 50, T + 60, bank="chem", ncores=1)
    write_job(client, 3, 1002, T + 100, T + 200, bank="chem", project="bronze")
    write_job(client, 4, 1002, T + 300, None, bank="chem")  # running: no record yet
    ok(capsys, "admin", "rebuild-accounting")

    def ids(*argv: str) -> list[int]:
        doc = orjson.loads(ok(capsys, "account", "view-job-records", "--json", *argv))
        return [job["jobid"] for job in doc["jobs"]]

    assert ids() == [2, 1, 3]  # by end time
    assert ids("--user=alice") == [2, 1]
    assert ids("-B", "physics") == []  # job 1 named no bank: it charged none
    assert ids("-B", "chem") == [2, 3]
    assert ids("--bank=chem", "-u", "bob") == [3]
    assert ids(f"--after-start-time={T + 50}") == [2, 3]
    assert ids(f"--before-end-time={T + 110}") == [2, 1]
    assert ids(f"-a={T + 20}", f"-b={T + 150}") == [2]
    assert ids("--jobid=3") == [3]
    assert ids("--project=bronze") == [3]
    assert ids("--project=silver") == []
    [record] = orjson.loads(ok(capsys, "account", "view-job-records", "--json", "-j",
                               "2"))["jobs"]
    assert record == {"jobid": 2, "username": "alice", "userid": 1001, "bank": "chem",
                      "queue": None, "t_run": T + 50, "t_inactive": T + 60, "nnodes": 1,
                      "ncores": 1, "ngpus": 0, "project": None}
    text = ok(capsys, "account", "view-job-records", "-u", "bob").splitlines()
    assert text[0].split()[:4] == ["JOBID", "USERNAME", "USERID", "BANK"]
    assert len(text) == 2 and text[1].split()[1:4] == ["bob", "1002", "chem"]
    table = list(csv.reader(io.StringIO(ok(capsys, "account", "view-job-records", "--csv"))))
    assert table[0][:3] == ["jobid", "username", "userid"] and len(table) == 4
    code, _out, err = run(capsys, "account", "view-job-records", "--after-start-time=soon")
    assert code == 2 and "invalid time" in err
    code, _out, err = run(capsys, "account", "view-job-records", "--user=zz-nobody-zz")
    assert code == 1 and "no user zz-nobody-zz" in err


def test_edit_factor_sets_a_weight_the_priority_uses(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    factors = orjson.loads(ok(capsys, "account", "view-factor", "--json"))["factors"]
    assert {f["factor"]: (f["weight"], f["source"]) for f in factors}["fairshare"] == \
        (100000, "config")
    ok(capsys, "account", "edit-factor", "--factor=fairshare", "--weight=500")
    ok(capsys, "account", "edit-factor", "--factor=job-size", "--weight=7")
    assert orjson.loads(ok(capsys, "account", "view-factor", "fairshare", "--json")) == \
        {"factor": "fairshare", "weight": 500, "source": "edit-factor"}
    text = ok(capsys, "account", "view-factor").splitlines()
    assert text[0].split() == ["FACTOR", "WEIGHT", "SOURCE"]
    assert ["job_size", "7", "edit-factor"] in [line.split() for line in text]
    # fluxes job priority (the plugin as the job manager builds it) weighs with them
    write_job(client, 1, 1001, T + 10, T + 110)
    ok(capsys, "admin", "rebuild-accounting")
    rebuild_joblist(client, KEYS)
    shown = orjson.loads(ok(capsys, "job", "priority", "1", "--json"))
    assert shown["factors"]["fairshare"]["weight"] == 500
    assert shown["factors"]["job_size"]["weight"] == 7
    assert shown["factors"]["urgency"]["weight"] == 1000
    count = client.xlen(KEYS.accounting)
    for argv, message in [(["edit-factor", "--factor=luck", "--weight=1"],
                           "unknown priority factor 'luck'"),
                          (["edit-factor", "--factor=age", "--weight=-1"],
                           "weight: expected an integer"),
                          (["view-factor", "luck"], "unknown priority factor")]:
        code, _out, err = run(capsys, "account", *argv)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert client.xlen(KEYS.accounting) == count


def test_export_db_and_pop_db_round_trip_all_or_none(
        client: redis.Redis, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    setup_banks(capsys)
    ok(capsys, "account", "edit-user", "alice", "--default-bank=chem")
    banks, users = tmp_path / "b.csv", tmp_path / "u.csv"
    ok(capsys, "account", "export-db", "-b", str(banks), "-u", str(users))
    assert banks.read_text().splitlines() == [
        "Bank,ParentBank,Shares,MaxRunningJobs,MaxActiveJobs,MaxNodes,MaxCores",
        "root,,1,,,,", "chem,root,1,,,,", "physics,root,3,10,,,"]
    assert users.read_text().splitlines() == [
        "Username,UserID,Bank,Shares,MaxRunningJobs,MaxActiveJobs,MaxNodes,Queues,MaxCores",
        "alice,1001,chem,2,5,7,-1,,-1", "alice,1001,physics,1,5,7,-1,,-1",
        "bob,1002,chem,1,4,8,-1,,-1"]
    before = {k: ok(capsys, "account", k, "--json") for k in ("list-banks", "list-users")}
    # into an empty instance: the same banks, users, limits and default banks
    client.delete(KEYS.accounting)
    assert ok(capsys, "account", "pop-db", "-b", str(banks), "-u", str(users)).strip() == \
        "added 3 banks and 3 users"
    assert {k: ok(capsys, "account", k, "--json") for k in before} == before
    # flux-accounting's shorter rows, no header, blank shares: 1
    more = tmp_path / "more.csv"
    more.write_text("carol,1003,physics\ndave,1004,chem,,2,,3\n")
    ok(capsys, "account", "pop-db", "--users", str(more))
    dave = orjson.loads(ok(capsys, "account", "view-user", "dave", "--json"))
    assert dave["associations"][0]["shares"] == 1
    assert dave["associations"][0]["limits"]["max_running_jobs"] == 2
    assert dave["associations"][0]["limits"]["max_active_jobs"] == 7  # the default
    assert dave["associations"][0]["limits"]["max_nodes"] == 3
    carol = orjson.loads(ok(capsys, "account", "view-user", "carol", "--json"))
    assert carol["associations"][0]["limits"] == {
        "max_running_jobs": 5, "max_active_jobs": 7, "max_nodes": None, "max_cores": None}
    count = client.xlen(KEYS.accounting)
    bad = tmp_path / "bad.csv"
    for text, message in [("erin,1005,chem\nfrank,1006,nope\n", "bad.csv line 2: no bank"),
                          ("erin,x,chem\n", "bad.csv line 1: userid: expected an integer"),
                          ("erin,1005,chem,1,,,,batch\n", "no queue 'batch'"),
                          ("erin,1005\n", "the first three required"),
                          ("erin,1005,chem\nerin,1005,chem\n",
                           "bad.csv line 2: user erin is in bank chem already")]:
        bad.write_text(text)
        code, _out, err = run(capsys, "account", "pop-db", "-u", str(bad))
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    code, _out, err = run(capsys, "account", "pop-db", "-u", str(tmp_path / "none.csv"))
    assert code == 1 and "cannot read" in err
    code, _out, err = run(capsys, "account", "pop-db")
    assert code == 1 and "give -b/--banks" in err
    assert client.xlen(KEYS.accounting) == count  # nothing written half-way


def test_usage_of_jobs_from_before_any_bank_is_charged_to_no_bank(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    # the journal names no bank for a job submitted before any bank existed (the ingest
    # resolves a bank only once one exists): it used to be charged to the default bank
    write_job(client, 1, 1001, T + 10, T + 110)
    setup_banks(capsys)
    write_job(client, 2, 1001, T + 200, T + 210, bank="physics")
    ok(capsys, "admin", "rebuild-accounting")
    report = orjson.loads(ok(capsys, "account", "usage", "--json"))
    rows = {(r["user"], r["bank"]): r["core_seconds"] for r in report["usage"]}
    assert rows == {("alice", None): 200.0, ("alice", "physics"): 20.0}
    assert {b["bank"]: b["core_seconds"] for b in report["banks"]} == \
        {"root": 20.0, "physics": 20.0}
    text = ok(capsys, "account", "usage").splitlines()
    assert ["alice", "-", "1", "200.0", "0.0", "100.0"] in [line.split() for line in text]


def test_clear_usage_resets_fair_share_of_banks_and_their_users(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110, bank="physics")  # 200 core-seconds
    write_job(client, 2, 1002, T + 10, T + 60, bank="chem")  # 100
    write_job(client, 3, 1001, T + 10, T + 20)  # before any bank: alice's default's, 20
    ok(capsys, "admin", "rebuild-accounting")

    def usage() -> dict[tuple[str, str], float]:
        rows = orjson.loads(ok(capsys, "account", "share", "--json"))["rows"]
        return {(r["name"], r["bank"]): r["usage"] for r in rows if r["kind"] == "user"}

    assert usage() == {("alice", "physics"): 220.0, ("alice", "chem"): 0.0,
                       ("bob", "chem"): 100.0}
    ok(capsys, "account", "clear-usage", "physics")
    assert usage() == {("alice", "physics"): 0.0, ("alice", "chem"): 0.0,
                       ("bob", "chem"): 100.0}
    # usage after the clear counts again (a job running across it: its later part only)
    write_job(client, 4, 1001, T + 200, T + 230, bank="physics")
    ok(capsys, "admin", "rebuild-accounting")
    assert usage()[("alice", "physics")] == 60.0
    ok(capsys, "account", "clear-usage", "root")  # the whole tree
    assert set(usage().values()) == {0.0}
    # history stays: sreport-like usage is not cleared
    rows = orjson.loads(ok(capsys, "account", "usage", "--json"))["usage"]
    assert sum(r["core_seconds"] for r in rows) == 380.0
    count = client.xlen(KEYS.accounting)
    code, _out, err = run(capsys, "account", "clear-usage", "physics", "nope")
    assert code == 1 and "no bank 'nope'" in err
    assert client.xlen(KEYS.accounting) == count


def test_update_usage_waits_for_the_fold_and_says_why_not(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    ok(capsys, "admin", "rebuild-accounting")
    assert "usage is up to date" in ok(capsys, "account", "update-usage")
    write_job(client, 1, 1001, T + 10, T + 110, bank="physics")  # no worker folds it
    code, _out, err = run(capsys, "account", "update-usage", "--timeout=0.1")
    assert code == 1 and "no accounting worker folds partition 0" in err
    assert len(err.strip().splitlines()) == 1
    ok(capsys, "admin", "rebuild-accounting")
    assert "usage is up to date" in ok(capsys, "account", "update-usage", "--timeout=0")
    code, _out, err = run(capsys, "account", "update-usage", "--timeout=nan")
    assert code == 1 and "--timeout" in err


def test_add_user_limits_default_as_flux_accountings(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    limits = {a["bank"]: a["limits"] for a in orjson.loads(
        ok(capsys, "account", "view-user", "alice", "--json"))["associations"]}
    assert limits["physics"] == {"max_running_jobs": 5, "max_active_jobs": 7,
                                 "max_nodes": None, "max_cores": None}
    ok(capsys, "account", "add-user", "--username=erin", "--userid=1005", "--bank=chem",
       "--max-running-jobs=-1", "--max-active-jobs=20")
    [erin] = orjson.loads(ok(capsys, "account", "view-user", "erin", "--json"))[
        "associations"]
    assert erin["limits"]["max_running_jobs"] is None
    assert erin["limits"]["max_active_jobs"] == 20


def test_queues_give_the_queue_factor_its_priorities(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    client.hset(KEYS.instance, "config", '[accounting]\nhalf-life = "0"\n'
                '[accounting.queue-priority]\nbatch = 1\ndebug = 4\n')
    setup_banks(capsys)
    ok(capsys, "account", "add-queue", "urgent", "--priority=8")
    ok(capsys, "account", "add-queue", "debug", "--priority=2")
    none = {"min_nodes_per_job": None, "max_nodes_per_job": None, "max_time_per_job": None,
            "max_running_jobs": None}
    assert orjson.loads(ok(capsys, "account", "list-queues", "--json"))["queues"] == [
        {"queue": "batch", "priority": 1, "source": "config", "limits": none},
        {"queue": "debug", "priority": 2, "source": "add-queue", "limits": none},
        {"queue": "urgent", "priority": 8, "source": "add-queue", "limits": none}]
    ok(capsys, "account", "edit-queue", "urgent", "--priority=16")
    assert orjson.loads(ok(capsys, "account", "view-queue", "urgent", "--json")) == \
        {"queue": "urgent", "priority": 16, "source": "add-queue", "limits": none}
    ok(capsys, "account", "delete-queue", "debug")
    text = ok(capsys, "account", "list-queues").splitlines()
    assert text[0].split() == ["QUEUE", "PRIORITY", "SOURCE", "MIN-NODES", "MAX-NODES",
                               "MAX-TIME", "MAX-RUN"]
    assert ["debug", "4", "config", "-", "-", "-", "-"] in [line.split() for line in text]
    # the multi-factor queue factor: the job's queue's priority over the largest one
    write_job(client, 1, 1001, T + 10, None, queue="debug")
    rebuild_joblist(client, KEYS)
    shown = orjson.loads(ok(capsys, "job", "priority", "1", "--json"))
    assert shown["factors"]["queue"]["factor"] == pytest.approx(4 / 16)
    count = client.xlen(KEYS.accounting)
    for argv, message in [(["add-queue", "urgent"], "queue urgent already exists"),
                          (["edit-queue", "nope", "--priority=1"], "no queue 'nope'"),
                          (["add-queue", "x", "--priority=-1"], "expected an integer"),
                          (["add-queue", "b@d"], "bad queue name"),
                          (["view-queue", "nope"], "no queue 'nope'")]:
        code, _out, err = run(capsys, "account", *argv)
        assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
    assert client.xlen(KEYS.accounting) == count


def test_association_queues_limit_where_its_jobs_go(
        client: redis.Redis, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    from fluxes.domain.accounting.limits import HeldJob, Holdings, check_submit
    from fluxes.store.accounting import load_accounts

    setup_banks(capsys)
    code, _out, err = run(capsys, "account", "edit-user", "bob", "--queues=batch")
    assert code == 1 and "no queue 'batch': add it with" in err
    ok(capsys, "account", "add-queue", "batch")
    ok(capsys, "account", "add-queue", "debug")
    ok(capsys, "account", "add-user", "--username=carol", "--userid=1003", "--bank=chem",
       "--queues=batch,debug")
    ok(capsys, "account", "edit-user", "bob", "--queues=debug")
    [bob] = orjson.loads(ok(capsys, "account", "view-user", "bob", "--json"))["associations"]
    assert bob["queues"] == ["debug"]
    accounts = load_accounts(client, KEYS)
    job = HeldJob(1002, None, False, 1, 1)
    assert check_submit(accounts, Holdings(), "bob", job, "debug") is not None
    assert check_submit(accounts, Holdings(), "bob", job, None) is not None
    with pytest.raises(ValueError, match="bob/chem may not use queue batch "
                                         r"\(its queues: debug\)"):
        check_submit(accounts, Holdings(), "bob", job, "batch")
    # alice names no queues: every queue
    assert check_submit(accounts, Holdings(), "alice", HeldJob(1001, None, False, 1, 1),
                        "batch") is not None
    ok(capsys, "account", "edit-user", "bob", "--queues=")
    [bob] = orjson.loads(ok(capsys, "account", "view-user", "bob", "--json"))["associations"]
    assert bob["queues"] == []
    users = tmp_path / "u.csv"
    ok(capsys, "account", "export-db", "-u", str(users), "-b", str(tmp_path / "b.csv"))
    assert "carol,1003,chem,1,5,7,-1,\"batch,debug\",-1" in users.read_text().splitlines()


def test_projects_as_flux_accounting_names_them(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.domain.accounting.limits import HeldJob, Holdings, check_submit
    from fluxes.store.accounting import load_accounts

    setup_banks(capsys)
    code, _out, err = run(capsys, "account", "edit-user", "bob", "--projects=bronze")
    assert code == 1 and "no project 'bronze': add it with" in err
    ok(capsys, "account", "add-project", "bronze")
    ok(capsys, "account", "add-project", "silver")
    assert orjson.loads(ok(capsys, "account", "list-projects", "--json")) == \
        {"projects": ["*", "bronze", "silver"]}
    assert ok(capsys, "account", "list-projects").split() == ["PROJECT", "*", "bronze",
                                                               "silver"]
    ok(capsys, "account", "add-user", "--username=carol", "--userid=1003", "--bank=chem",
       "--projects=silver,bronze")
    [carol] = orjson.loads(ok(capsys, "account", "view-user", "carol", "--json"))[
        "associations"]
    assert carol["projects"] == ["silver", "bronze", "*"]
    assert carol["default_project"] == "silver"
    [bob] = orjson.loads(ok(capsys, "account", "view-user", "bob", "--json"))["associations"]
    assert bob["projects"] == ["*"] and bob["default_project"] == "*"
    accounts = load_accounts(client, KEYS)
    job = HeldJob(1003, None, False, 1, 1)
    for project in (None, "*", "bronze"):
        assert check_submit(accounts, Holdings(), "carol", job, None, project) is not None
    with pytest.raises(ValueError, match=r"carol/chem is not in project gold \(its "
                                         r"projects: silver, bronze, \*\)"):
        check_submit(accounts, Holdings(), "carol", job, None, "gold")
    count = client.xlen(KEYS.accounting)
    for argv, message in [(["add-project", "bronze"], "project bronze already exists"),
                          (["add-project", "*"], "project * already exists"),
                          (["delete-project", "silver"], "listed by carol/chem"),
                          (["delete-project", "gold"], "no project 'gold'")]:
        code, _out, err = run(capsys, "account", *argv)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert client.xlen(KEYS.accounting) == count
    ok(capsys, "account", "edit-user", "carol", "--projects=")
    ok(capsys, "account", "delete-project", "silver")
    assert orjson.loads(ok(capsys, "account", "list-projects", "--json")) == \
        {"projects": ["*", "bronze"]}


def test_clear_usage_ignore_older_than_keeps_the_later_usage(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 110, bank="physics")  # 2 cores
    write_job(client, 2, 1001, T + 10, T + 20, bank="physics")  # all before T + 60
    write_job(client, 3, 1002, T + 10, T + 60, bank="chem")  # another bank: kept
    ok(capsys, "admin", "rebuild-accounting")
    ok(capsys, "account", "clear-usage", "physics", f"--ignore-older-than={T + 60}")
    rows = orjson.loads(ok(capsys, "account", "share", "--json"))["rows"]
    usage = {(r["name"], r["bank"]): r["usage"] for r in rows if r["kind"] == "user"}
    assert usage == {("alice", "physics"): 100.0, ("alice", "chem"): 0.0,
                     ("bob", "chem"): 100.0}
    code, _out, err = run(capsys, "account", "clear-usage", "root",
                          "--ignore-older-than=never")
    assert code == 2 and "invalid time" in err


def test_queue_limits_as_flux_accountings_add_queue_options(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.domain.accounting.limits import HeldJob, Holdings, check_submit
    from fluxes.store.accounting import load_accounts

    setup_banks(capsys)
    ok(capsys, "account", "add-queue", "debug", "--max-nodes-per-job=2",
       "--max-time-per-job=30m", "--max-running-jobs=3")
    shown = orjson.loads(ok(capsys, "account", "view-queue", "debug", "--json"))
    assert shown["priority"] == 0 and shown["limits"] == {
        "min_nodes_per_job": None, "max_nodes_per_job": 2, "max_time_per_job": 1800,
        "max_running_jobs": 3}
    ok(capsys, "account", "edit-queue", "debug", "--min-nodes-per-job=2",
       "--max-running-jobs=-1")
    assert ok(capsys, "account", "list-queues").splitlines()[1].split() == [
        "debug", "0", "add-queue", "2", "2", "30m", "-"]
    accounts = load_accounts(client, KEYS)
    assert check_submit(accounts, Holdings(), "bob", HeldJob(1002, None, False, 2, 1, 60.0),
                        "debug") is not None
    with pytest.raises(ValueError, match="over the max-time-per-job"):
        check_submit(accounts, Holdings(), "bob", HeldJob(1002, None, False, 2, 1, 3600.0),
                     "debug")
    count = client.xlen(KEYS.accounting)
    for argv, message in [(["edit-queue", "debug"], "give --priority or a limit"),
                          (["edit-queue", "debug", "--max-nodes-per-job=x"], "a count"),
                          (["edit-queue", "debug", "--max-time-per-job=soon"], "a duration"),
                          (["edit-queue", "debug", "--max-nodes-per-job=-3"], ">= 0")]:
        code, _out, err = run(capsys, "account", *argv)
        assert code == 1 and message in err and len(err.strip().splitlines()) == 1, err
    assert client.xlen(KEYS.accounting) == count


def test_view_job_records_duration_filters_and_format(
        client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    from fluxes.cli.display import fmt_id

    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 40, bank="chem", duration=60.0)  # 30 of 60
    write_job(client, 2, 1002, T + 10, T + 610, bank="chem", duration=3600.0)  # 600/3600
    write_job(client, 3, 1002, T + 10, T + 20, bank="chem")  # no time limit
    ok(capsys, "admin", "rebuild-accounting")

    def ids(*argv: str) -> list[str]:
        return ok(capsys, "account", "view-job-records", "-o", "{userid}", *argv).split()[1:]

    assert ids() == ["1002", "1001", "1002"]  # by end time: 3, 1, 2
    assert ids("-d", "> 0", "< 120") == ["1001"]
    assert ids("-e", ">= 600") == ["1002"]
    assert ids("-D", "< 0") == ["1002"]  # job 3: no limit, ran 10 s
    assert ids("--requested-duration=<=3600", "--actual-duration", "> 20") == \
        ["1001", "1002"]
    text = ok(capsys, "account", "view-job-records", "-j", "2", "-o",
              "{jobid:<6}|{username:<5}|{requested_duration:>6.0f}|{duration_delta:.0f}")
    assert text.splitlines() == ["jobid |username|requested_duration|duration_delta",
                                 f"{fmt_id(2):<6}|bob  |  3600|3000"]
    code, _out, err = run(capsys, "account", "view-job-records", "-d", "60")
    assert code == 2 and "start with one of" in err
    code, _out, err = run(capsys, "account", "view-job-records", "-o", "{nope}")
    assert code == 2 and "unknown field 'nope'" in err


def test_usage_per_project(client: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    setup_banks(capsys)
    write_job(client, 1, 1001, T + 10, T + 40, bank="chem", project="bronze")  # 2 cores
    write_job(client, 2, 1002, T + 10, T + 20, bank="chem", project="bronze")
    write_job(client, 3, 1002, T + 10, T + 20, bank="chem")
    ok(capsys, "admin", "rebuild-accounting")
    doc = orjson.loads(ok(capsys, "account", "usage", "--json"))
    assert [(p["project"], p["jobs"], p["core_seconds"]) for p in doc["projects"]] == [
        (None, 1, 20.0), ("bronze", 2, 80.0)]
    lines = ok(capsys, "account", "usage", "--by-project").splitlines()
    assert [line.split() for line in lines] == [
        ["PROJECT", "JOBS", "CORE-SECONDS", "GPU-SECONDS", "NODE-SECONDS"],
        ["-", "1", "20.0", "0.0", "10.0"], ["bronze", "2", "80.0", "0.0", "40.0"]]
    assert ok(capsys, "account", "usage", "--by-project", "--csv").splitlines()[2] == \
        "bronze,2,80.0,0.0,40.0"
