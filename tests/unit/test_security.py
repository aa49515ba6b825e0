"""ACL rule building, user names, URLs and credentials files (fluxes.store.security), no Redis."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.cli.main import main
from fluxes.errors import ConfigError
from fluxes.store.keys import Keys
from fluxes.store.security import (
    ENV_CREDENTIALS,
    Credentials,
    apply_credentials,
    check_uid,
    check_user_name,
    credentials_path,
    glob_escape,
    is_local_url,
    load_credentials,
    owner_acl_rules,
    parse_credentials,
    password_hash,
    read_patterns,
    server_of,
    shared_redis_problem,
    strip_password,
    url_credentials,
    user_acl_rules,
    with_userinfo,
    without_default_user,
    write_credentials,
)

# ------------------------------------------------------------------ names


@pytest.mark.parametrize("name", ["alice", "bob_2", "a.b-c", "X", "_svc", "7"])
def test_good_user_names(name: str) -> None:
    assert check_user_name(name) == name


@pytest.mark.parametrize("name", ["", "default", "a:b", "a*", "a?", "[a]", "a\\b", "{fx}",
                                  "a b", ".hidden", "-x", "é", "x" * 65, "a/b"])
def test_bad_user_names(name: str) -> None:
    with pytest.raises(ValueError):
        check_user_name(name)


@given(st.text(max_size=70))
def test_a_good_name_has_nothing_special_in_keys_or_patterns(name: str) -> None:
    try:
        check_user_name(name)
    except ValueError:
        return
    assert not set(name) & set(":{}*?[]\\ \t\n/")
    assert glob_escape(name) == name


@pytest.mark.parametrize("uid", [-1, 2**32, True, "5"])
def test_bad_uids(uid: object) -> None:
    with pytest.raises(ValueError):
        check_uid(uid)  # type: ignore[arg-type]


def test_glob_escape() -> None:
    assert glob_escape("{fx}:submit:alice") == "{fx}:submit:alice"
    assert glob_escape("a*b?[c]\\") == "a\\*b\\?\\[c\\]\\\\"


# ------------------------------------------------------------------ ACL rules


def root_and_selectors(rules: list[str]) -> tuple[list[str], list[list[str]]]:
    root = [r for r in rules if not r.startswith("(")]
    selectors = [r[1:-1].split() for r in rules if r.startswith("(")]
    return root, selectors


def test_user_rules_one_partition() -> None:
    rules = user_acl_rules(Keys("fx"), "alice", 5001, "s3cret")
    assert rules[:2] == ["reset", "on"]
    assert f"#{password_hash('s3cret')}" in rules
    assert not any("s3cret" in r for r in rules)  # only the hash
    root, selectors = root_and_selectors(rules)
    key_rules = [r for r in root if "~" in r]
    assert all(r.startswith("%R~") for r in key_rules)  # the root may only read
    assert sorted(r[3:] for r in key_rules) == sorted([
        "{fx}:job:*", "{fx}:blob:5001:*", "{fx}:private:5001:*", "{fx}:journal", "{fx}:jl:*",
        "{fx}:acct:*", "{fx}:output:5001:*", "{fx}:pmi:5001:*", "{fx}:instance", "{fx}:queues",
        "{fx}:accounting",
        "{fx}:sched:status"])
    assert not any(r.startswith("+@") or r in ("allkeys", "allcommands", "~*") for r in rules)
    assert "+xadd" not in root and "+del" not in root and "+set" not in root
    assert sorted(selectors) == sorted([
        ["+xadd", "%W~{fx}:submit:alice"],
        ["+blpop", "+lpop", "+del", "~{fx}:reply:alice:*"]])


def test_user_rules_several_partitions_and_a_glob_namespace() -> None:
    keys = Keys("a*", 4)
    patterns = read_patterns(keys, 5002)
    assert "{a\\*:p*}:journal" in patterns and "{a\\*:p*}:job:*" in patterns
    assert "{a\\*}:instance" in patterns
    assert "{a\\*:p*}:blob:5002:*" in patterns and "{a\\*}:output:5002:*" in patterns
    rules = user_acl_rules(keys, "bob", 5002, "pw")
    assert "(+xadd %W~{a\\*}:submit:bob)" in rules


def test_user_rules_are_deterministic_and_need_a_password() -> None:
    assert user_acl_rules(Keys(), "a", 1, "p") == user_acl_rules(Keys(), "a", 1, "p")
    with pytest.raises(ValueError):
        user_acl_rules(Keys(), "a", 1, "")
    with pytest.raises(ValueError):
        user_acl_rules(Keys(), "a:b", 1, "p")
    with pytest.raises(ValueError):
        user_acl_rules(Keys(), "a", -1, "p")


def test_private_keys_carry_the_owner_and_match_only_the_owners_pattern() -> None:
    from fnmatch import fnmatchcase

    keys = Keys("fx")
    mine = read_patterns(keys, 500)
    # Redis globs: no escapes needed here, so fnmatch judges them the same way
    own = [keys.output(500, 7), keys.blob(0, 500, "abc"), keys.pmi(500, 7),
           keys.private(0, 500, 7)]
    others = [keys.output(5001, 7), keys.output(50, 7), keys.blob(0, 5001, "abc"),
              keys.blob(0, 50, "abc"), keys.pmi(5001, 7), keys.pmi(50, 7),
              keys.private(0, 5001, 7), keys.private(0, 50, 7)]
    assert all(any(fnmatchcase(k, p) for p in mine) for k in own)
    assert not any(fnmatchcase(k, p) for k in others for p in mine)
    public = [keys.job(7), keys.eventlog(7), keys.journal(0), keys.joblist_jobs(0)]
    assert all(any(fnmatchcase(k, p) for p in mine) for k in public)


def test_owner_rules() -> None:
    rules = owner_acl_rules("pw")
    assert rules == ["on", "resetpass", f"#{password_hash('pw')}", "~*", "&*", "+@all"]
    with pytest.raises(ValueError):
        owner_acl_rules("")


def test_without_default_user() -> None:
    text = "user alice on #ab ~x +ping\nuser default on #cd ~* &* +@all\nuser defaultish on\n"
    assert without_default_user(text) == "user alice on #ab ~x +ping\nuser defaultish on\n"
    assert without_default_user("") == ""


# ------------------------------------------------------------------ URLs


def test_url_credentials_and_userinfo() -> None:
    assert url_credentials("redis://h:6379/0") == (None, None)
    assert url_credentials("redis://:pw@h") == (None, "pw")
    assert url_credentials("redis://al%40ce:p%2Fw@h/0?ns=fx") == ("al@ce", "p/w")
    assert url_credentials("redis://h?password=x") == (None, "x")
    url = with_userinfo("unix:///run/r.sock?ns=fx", "alice", "a/b@c")
    assert url == "unix://alice:a%2Fb%40c@/run/r.sock?ns=fx"
    assert url_credentials(url) == ("alice", "a/b@c")
    assert strip_password(url) == "unix:///run/r.sock?ns=fx"
    assert strip_password("rediss://u:p@h1:1,h2:2/svc") == "rediss://h1:1,h2:2/svc"
    with pytest.raises(ValueError):
        url_credentials("no-scheme")


def test_server_of() -> None:
    assert server_of("redis://h/0?ns=a") == server_of("redis://u:p@H:6379/1")
    assert server_of("redis://h") != server_of("redis://h:6380")
    assert server_of("unix:///run/./r.sock?ns=x") == server_of("unix://u:p@/run/r.sock")
    assert server_of("unix:///a.sock") != server_of("unix:///b.sock")
    assert server_of("redis+sentinel://b:1,a/svc") == server_of("redis+sentinel://a:26379,b:1/x")


@pytest.mark.parametrize(("url", "local"), [
    ("unix:///tmp/r.sock", True), ("redis://localhost", True), ("redis://127.0.0.1:7000", True),
    ("redis://[::1]:6379", True), ("redis+cluster://127.0.0.1:1,localhost:2", True),
    ("redis://10.0.0.5", False), ("rediss://redis.example.org:6380", False),
    ("redis+cluster://127.0.0.1:1,10.0.0.2:2", False)])
def test_is_local_url(url: str, local: bool) -> None:
    assert is_local_url(url) is local


def test_shared_redis_problem() -> None:
    assert shared_redis_problem("unix:///tmp/r.sock") is None
    assert shared_redis_problem("redis://u:pw@10.0.0.5") is None
    problem = shared_redis_problem("redis://someone@10.0.0.5:6379")
    assert problem is not None
    assert problem.startswith("a password or ACL user is required for a shared Redis: "
                              "redis://10.0.0.5:6379")
    assert "\n" not in problem


# ------------------------------------------------------------------ credentials files


def test_parse_credentials() -> None:
    creds = parse_credentials(b'{"uri": "redis://a:p@h?ns=fx", "user": "a"}')
    assert creds == Credentials("redis://a:p@h?ns=fx", "a")
    assert parse_credentials(Credentials("unix:///x", None).to_json()).user is None
    for bad in (b"nope", b"[]", b'{"user": "a"}', b'{"uri": 5}', b'{"uri": "u://x", "user": 1}',
                b'{"uri": "u://x", "user": "a:b"}', b'{"uri": "u://x", "extra": 1}'):
        with pytest.raises(ConfigError):
            parse_credentials(bad)


def test_write_and_load_credentials(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "alice.json"
    write_credentials(path, Credentials("redis://alice:pw@h?ns=fx", "alice"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_credentials(path) == Credentials("redis://alice:pw@h?ns=fx", "alice", path)
    assert [p.name for p in path.parent.iterdir()] == ["alice.json"]  # no temp file left
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_credentials(path)
    with pytest.raises(ConfigError):
        load_credentials(tmp_path / "missing.json")


def test_credentials_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert credentials_path({}, home) is None
    default = home / ".config" / "fluxes" / "credentials.json"
    write_credentials(default, Credentials("redis://h"))
    assert credentials_path({}, home) == default
    assert credentials_path({ENV_CREDENTIALS: ""}, home) is None
    other = tmp_path / "other.json"
    write_credentials(other, Credentials("redis://h"))
    assert credentials_path({ENV_CREDENTIALS: str(other)}, home) == other
    with pytest.raises(ConfigError, match=ENV_CREDENTIALS):
        credentials_path({ENV_CREDENTIALS: str(tmp_path / "typo.json")}, home)


def test_apply_credentials(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    write_credentials(path, Credentials("unix://alice:pw@/run/r.sock?ns=fx", "alice"))
    env = {ENV_CREDENTIALS: str(path)}
    # no credentials at all: unchanged
    assert apply_credentials("redis://h", {ENV_CREDENTIALS: ""}) == ("redis://h", None)
    # no URI: the file's
    assert apply_credentials(None, env) == ("unix://alice:pw@/run/r.sock?ns=fx", "alice")
    # the same server: the file's user and password go in, the URI's namespace stays
    assert apply_credentials("unix:///run/r.sock?ns=other", env) == \
        ("unix://alice:pw@/run/r.sock?ns=other", "alice")
    # another server (a private instance): untouched, submit as the UNIX user
    assert apply_credentials("unix:///tmp/mine.sock?ns=fx", env) == \
        ("unix:///tmp/mine.sock?ns=fx", None)
    # a URI with a password of its own wins
    assert apply_credentials("unix://bob:x@/run/r.sock", env) == ("unix://bob:x@/run/r.sock", None)


def test_owner_credentials_name_no_user(tmp_path: Path) -> None:
    path = tmp_path / "owner.json"
    write_credentials(path, Credentials("redis://default:pw@127.0.0.1:7000?ns=fx"))
    uri, user = apply_credentials("redis://127.0.0.1:7000?ns=fx", {ENV_CREDENTIALS: str(path)})
    assert uri == "redis://default:pw@127.0.0.1:7000?ns=fx" and user is None


# ------------------------------------------------------------------ fluxes start refusals


def test_start_refuses_a_shared_redis_without_password(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CREDENTIALS, "")
    state = tmp_path / "state"
    assert main(["start", "--detach", "--state-dir", str(state),
                 "--redis", "redis://10.255.0.1:6379"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fluxes: a password or ACL user is required for a shared Redis: "
                          "redis://10.255.0.1:6379")
    assert len(err.splitlines()) == 1
    assert not state.exists()
    assert main(["start", "--detach", "--require-auth", "--redis",
                 "redis://u:p@10.255.0.1"]) == 1
    assert "--require-auth" in capsys.readouterr().err


def test_start_accepts_a_shared_redis_with_insecure_or_a_password(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import argparse

    from fluxes.cli.cmd_start import _check_shared_redis

    monkeypatch.setenv(ENV_CREDENTIALS, "")
    for redis_url, insecure in (("redis://10.255.0.1", True), ("redis://:pw@10.255.0.1", False),
                                ("unix:///tmp/x.sock", False)):
        _check_shared_redis(argparse.Namespace(redis=redis_url, insecure=insecure,
                                               require_auth=False))
    # a password from the owner's credentials file counts
    path = tmp_path / "c.json"
    write_credentials(path, Credentials("redis://default:pw@10.255.0.1:6379"))
    monkeypatch.setenv(ENV_CREDENTIALS, str(path))
    _check_shared_redis(argparse.Namespace(redis="redis://10.255.0.1", insecure=False,
                                           require_auth=False))


def test_write_credentials_chowns_only_as_root(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    write_credentials(path, Credentials("redis://h", "x"), uid=12345, gid=None)
    assert path.stat().st_uid == (12345 if os.geteuid() == 0 else os.geteuid())


def test_workers_refuse_a_shared_redis_without_a_password(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    # the same rule as fluxes start --redis, checked before connecting
    from fluxes.cli.worker_args import build_parser
    from fluxes.errors import FluxesError
    from workers.__main__ import refuse_open_redis

    monkeypatch.setenv("FLUXES_CREDENTIALS", "")
    with pytest.raises(FluxesError, match="a password or ACL user is required"):
        refuse_open_redis("redis://10.255.0.1:6379?ns=fx")
    monkeypatch.setenv("FLUXES_URI", "redis://10.255.0.1:6379?ns=fx")
    with pytest.raises(FluxesError, match=r"10\.255\.0\.1"):
        refuse_open_redis(None)
    for fine in ("redis://:pw@10.255.0.1:6379?ns=fx", "redis://127.0.0.1:6379?ns=fx",
                 f"unix://{tmp_path}/redis.sock?ns=fx"):
        refuse_open_redis(fine)
    assert build_parser().parse_args(["ingest", "--insecure"]).insecure
