"""fluxes web's sessions: signed cookies any server of the instance reads, the password
sealed in them, CSRF tokens; and where the server finds its secret and listens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fluxes.config import InstanceConfig
from fluxes.errors import ConfigError, FluxesError
from fluxes.web.auth import Session, Sessions, csrf_ok, new_session
from fluxes.web.server import parse_listen, session_secret

SECRET = "a-secret-of-the-instance-0123456789"


def _alice() -> Session:
    return Session(csrf="tok", user="alice", redis_user="alice", password="pw-" + "x" * 40,
                   owner=False, uid=5001)


def test_a_session_survives_another_server_with_the_same_secret() -> None:
    cookie = Sessions(SECRET).dump(_alice())
    assert Sessions(SECRET).load(cookie) == _alice()


def test_a_guest_session_holds_its_csrf_token_only() -> None:
    guest = new_session()
    loaded = Sessions(SECRET).load(Sessions(SECRET).dump(guest))
    assert loaded == guest and loaded.guest


def test_the_password_is_not_readable_in_the_cookie() -> None:
    import itsdangerous

    cookie = Sessions(SECRET).dump(_alice())
    # what anyone holding the cookie reads, without the secret
    _valid, doc = itsdangerous.URLSafeTimedSerializer("wrong").loads_unsafe(
        cookie, salt="fluxes-web-session")
    text = repr(doc)
    assert "alice" in text  # the name is only signed
    assert "pw-" not in text and "x" * 10 not in text


def test_a_forged_or_foreign_cookie_is_a_guest() -> None:
    cookie = Sessions(SECRET).dump(_alice())
    assert Sessions("another-secret-entirely-01234").load(cookie) is None
    head, _dot, signature = cookie.rpartition(".")
    tampered = head + "." + ("A" if signature[0] != "A" else "B") + signature[1:]
    assert Sessions(SECRET).load(tampered) is None
    assert Sessions(SECRET).load("") is None and Sessions(SECRET).load("garbage") is None


def test_an_old_session_expires() -> None:
    cookie = Sessions(SECRET).dump(_alice())
    assert Sessions(SECRET, max_age=-1).load(cookie) is None


def test_two_seals_of_one_password_differ() -> None:
    sessions = Sessions(SECRET)
    assert sessions.dump(_alice()) != sessions.dump(_alice())


def test_csrf_tokens_must_match() -> None:
    session = new_session()
    assert csrf_ok(session, session.csrf)
    assert not csrf_ok(session, None) and not csrf_ok(session, "")
    assert not csrf_ok(session, new_session().csrf)


def test_a_flash_message_is_signed() -> None:
    sessions = Sessions(SECRET)
    assert sessions.load_flash(sessions.dump_flash("drained", error=True)) == ("drained", True)
    assert Sessions("another-secret-entirely-01234").load_flash(
        sessions.dump_flash("x")) is None


def test_the_secret_comes_from_the_file_then_the_config(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("from-the-file-0123456789\n")
    os.chmod(path, 0o600)
    config = InstanceConfig.from_toml('[web]\nsecret = "from-the-config-0123456"\n')
    assert session_secret(config, str(path))[0] == "from-the-file-0123456789"
    secret, warning = session_secret(config)
    assert secret == "from-the-config-0123456" and warning and "every user" in warning
    by_file = InstanceConfig.from_toml(f'[web]\nsecret-file = "{path}"\n')
    assert session_secret(by_file) == ("from-the-file-0123456789", None)


def test_no_secret_is_refused_unless_insecure_dev(tmp_path: Path) -> None:
    with pytest.raises(FluxesError, match="no session secret"):
        session_secret(InstanceConfig())
    one, warning = session_secret(InstanceConfig(), insecure_dev=True)
    assert len(one) >= 32 and warning and "insecure" in warning
    assert session_secret(InstanceConfig(), insecure_dev=True)[0] != one


def test_a_secret_file_others_can_read_or_too_short_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("long-enough-secret-0123456789")
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        session_secret(InstanceConfig(), str(path))
    path.write_text("short")
    os.chmod(path, 0o600)
    with pytest.raises(ConfigError, match="at least"):
        session_secret(InstanceConfig(), str(path))


def test_the_web_table_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"web\.secret: at least"):
        InstanceConfig.from_toml('[web]\nsecret = "short"\n')
    with pytest.raises(ConfigError, match=r"web\.port: unknown key"):
        InstanceConfig.from_toml("[web]\nport = 1\n")
    with pytest.raises(ConfigError, match=r"web\.secret-file: expected a string"):
        InstanceConfig.from_toml("[web]\nsecret-file = 3\n")


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)), (":0", ("127.0.0.1", 0)),
    ("9000", ("127.0.0.1", 9000)), ("0.0.0.0:80", ("0.0.0.0", 80)),
    ("[::1]:8443", ("::1", 8443))])
def test_listen_addresses(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["host:port", "1.2.3.4:70000", ""])
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError, match="--listen"):
        parse_listen(text)
