"""Who is looking: session cookies, CSRF tokens, and a Redis connection per identity.

A session lives in one cookie, signed with the instance's ``[web]`` secret
(itsdangerous), so that any web server of the instance reads it: there is no
server-side state. A visitor without a login is a guest and gets a session
too, holding only its CSRF token. A login holds the fluxes user name, the
Redis ACL user it authenticates as and that user's password, encrypted with
a key derived from the secret (the cookie is signed, not secret, by itself).

Every read and action of a logged-in session goes through a connection made
with the user's own credentials, so Redis' ACLs decide what they may see and
do, exactly as for the CLI (docs/security.md). A forged or stolen secret gains
nothing Redis would not grant anyway: the password must still be right.

Logins are refused where Redis would accept any password for the user (the
``default`` user of an instance started without ``--require-auth``): a web
server must not hand out what the password does not protect.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import itsdangerous

from fluxes.store.connection import connect
from fluxes.store.errors import StoreError
from fluxes.store.instance import Instance, InstanceURI, NoInstanceError
from fluxes.store.security import REDIS_DEFAULT_USER, USER_NAME, with_userinfo

#: The session cookie and the one that carries a message to the next page.
COOKIE = "fluxes_session"
FLASH_COOKIE = "fluxes_flash"
#: How long a session lasts (seconds): a login then asks for the password again.
SESSION_MAX_AGE_S = 12 * 3600
#: Connections kept open, one per logged-in identity (least recently used go first).
MAX_IDENTITIES = 64
_SALT = "fluxes-web-session"
_FLASH_SALT = "fluxes-web-flash"


class LoginError(Exception):
    """A login that did not succeed (the message is shown on the login page)."""


@dataclass(frozen=True)
class Session:
    """What a session cookie holds (the password decrypted)."""

    csrf: str
    #: the fluxes user name (None: a guest)
    user: str | None = None
    #: the Redis ACL user the session authenticates as
    redis_user: str | None = None
    password: str | None = None
    #: whether the identity has the instance owner's full access
    owner: bool = False
    #: the user's uid when known (to offer the cancel button on their own jobs)
    uid: int | None = None

    @property
    def guest(self) -> bool:
        """True without a login."""
        return self.user is None


def new_session() -> Session:
    """A guest session with a fresh CSRF token."""
    return Session(csrf=secrets.token_urlsafe(24))


def _keystream(key: bytes, nonce: bytes, length: int) -> bytes:
    """HMAC-SHA256 in counter mode: a pseudo-random pad as long as the text."""
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hmac.new(key, nonce + counter.to_bytes(4, "big"), hashlib.sha256).digest()
        counter += 1
    return bytes(out[:length])


class Sessions:
    """Signs, encrypts and reads session cookies with the instance's web secret."""

    def __init__(self, secret: str, max_age: int = SESSION_MAX_AGE_S) -> None:
        if not secret:
            raise ValueError("a session secret is needed")
        self.max_age = max_age
        self._signer = itsdangerous.URLSafeTimedSerializer(secret, salt=_SALT)
        self._flash = itsdangerous.URLSafeTimedSerializer(secret, salt=_FLASH_SALT)
        self._key = hmac.new(secret.encode(), b"fluxes-web password key",
                             hashlib.sha256).digest()

    def _seal(self, password: str) -> tuple[str, str]:
        nonce = secrets.token_bytes(16)
        data = password.encode()
        sealed = bytes(a ^ b for a, b in zip(data, _keystream(self._key, nonce, len(data)),
                                             strict=True))
        return (base64.urlsafe_b64encode(nonce).decode(),
                base64.urlsafe_b64encode(sealed).decode())

    def _open(self, nonce: str, sealed: str) -> str:
        raw_nonce = base64.urlsafe_b64decode(nonce)
        data = base64.urlsafe_b64decode(sealed)
        pad = _keystream(self._key, raw_nonce, len(data))
        return bytes(a ^ b for a, b in zip(data, pad, strict=True)).decode()

    def dump(self, session: Session) -> str:
        """The cookie value of ``session``."""
        doc: dict[str, Any] = {"c": session.csrf}
        if session.user is not None and session.password is not None:
            nonce, sealed = self._seal(session.password)
            doc.update(u=session.user, r=session.redis_user, n=nonce, p=sealed,
                       o=session.owner, i=session.uid)
        return str(self._signer.dumps(doc))

    def load(self, cookie: str | None) -> Session | None:
        """The session a cookie holds; None when it is missing, forged or too old."""
        if not cookie:
            return None
        try:
            doc = self._signer.loads(cookie, max_age=self.max_age)
            if not isinstance(doc, dict) or not isinstance(doc.get("c"), str):
                return None
            if "u" not in doc:
                return Session(csrf=doc["c"])
            uid = doc.get("i")
            return Session(csrf=doc["c"], user=str(doc["u"]), redis_user=str(doc["r"]),
                           password=self._open(str(doc["n"]), str(doc["p"])),
                           owner=bool(doc.get("o")), uid=uid if isinstance(uid, int) else None)
        except (itsdangerous.BadData, KeyError, ValueError, TypeError):
            return None

    def dump_flash(self, message: str, error: bool = False) -> str:
        """A cookie value carrying a one-line message to the next page."""
        return str(self._flash.dumps({"m": message[:300], "e": error}))

    def load_flash(self, cookie: str | None) -> tuple[str, bool] | None:
        """The message of a flash cookie (and whether it reports an error)."""
        if not cookie:
            return None
        try:
            doc = self._flash.loads(cookie, max_age=120)
            return str(doc["m"]), bool(doc.get("e"))
        except (itsdangerous.BadData, KeyError, TypeError):
            return None


def csrf_ok(session: Session, token: str | None) -> bool:
    """Whether a form's token is the session's (compared in constant time)."""
    return bool(token) and hmac.compare_digest(session.csrf.encode(), str(token).encode())


class Identities:
    """The Redis connections of logged-in identities, next to the server's own."""

    def __init__(self, server: Instance) -> None:
        self.server = server
        self._cache: OrderedDict[tuple[str, str], Instance] = OrderedDict()
        self._lock = threading.Lock()

    def _url(self, redis_user: str, password: str) -> str:
        return with_userinfo(self.server.uri.redis_url, redis_user, password)

    def _open(self, redis_user: str, password: str) -> Instance:
        """A new connection as ``redis_user`` (LoginError when Redis refuses it)."""
        url = self._url(redis_user, password)
        client = connect(url, client_name="fluxes-web")
        try:
            return Instance(InstanceURI(url, self.server.uri.ns), client=client)
        except NoInstanceError:
            client.close()
            raise LoginError("wrong user name or password") from None

    def instance(self, session: Session) -> Instance:
        """The connection a session reads and acts with: the user's own, or the server's
        for a guest. LoginError when the user's credentials no longer work (password
        renewed by ``fluxes admin adduser``, user deleted)."""
        if session.guest or session.redis_user is None or session.password is None:
            return self.server
        key = (session.redis_user, hashlib.sha256(session.password.encode()).hexdigest())
        with self._lock:
            found = self._cache.get(key)
            if found is not None:
                self._cache.move_to_end(key)
                return found
        made = self._open(session.redis_user, session.password)
        with self._lock:
            self._cache[key] = made
            while len(self._cache) > MAX_IDENTITIES:
                _key, old = self._cache.popitem(last=False)
                old.redis.close()
        return made

    def forget(self, session: Session) -> None:
        """Drop the cached connection of a session whose credentials stopped working."""
        if session.redis_user is None or session.password is None:
            return
        key = (session.redis_user, hashlib.sha256(session.password.encode()).hexdigest())
        with self._lock:
            old = self._cache.pop(key, None)
        if old is not None:
            old.redis.close()

    def login(self, name: str, password: str, session: Session) -> Session:
        """Check ``name``'s password against Redis and return the logged-in session.

        ``name`` is a fluxes user (their ACL user has the same name), or the instance
        owner's name, who authenticates as Redis' ``default`` user as their
        credentials file does.
        """
        name = name.strip()
        if not USER_NAME.fullmatch(name) or name == REDIS_DEFAULT_USER or not password:
            raise LoginError("wrong user name or password")
        owner_name, owner_uid = self.server.owner()
        candidates = [name] + ([REDIS_DEFAULT_USER] if name == owner_name else [])
        for redis_user in candidates:
            try:
                inst = self._open(redis_user, password)
            except LoginError:
                continue
            except (StoreError, OSError) as exc:
                raise LoginError(f"cannot reach the instance: {str(exc)[:100]}") from None
            try:
                if self._accepts_any_password(redis_user):
                    raise LoginError(
                        "this instance asks no password of that user (start it with "
                        "--require-auth to use logins); you can look around as a guest")
                owner = _is_owner(inst)
            finally:
                inst.redis.close()
            uid = owner_uid if owner else self._uid_of(name)
            return replace(session, user=name, redis_user=redis_user, password=password,
                           owner=owner, uid=uid, csrf=secrets.token_urlsafe(24))
        raise LoginError("wrong user name or password")

    def _accepts_any_password(self, redis_user: str) -> bool:
        """Whether Redis lets ``redis_user`` in with any password (nopass)."""
        try:
            self._open(redis_user, secrets.token_urlsafe(32)).redis.close()
        except LoginError:
            return False
        return True

    def _uid_of(self, name: str) -> int | None:
        """The uid of a fluxes user: the users hash when the server may read it, else
        this machine's password database."""
        from fluxes.service.users import local_uid
        from fluxes.store.users import UserTable

        found = UserTable(self.server.redis, self.server.keys).uid(name)
        return found if found is not None else local_uid(name)


def _is_owner(inst: Instance) -> bool:
    """Whether a connection has the instance owner's access (it may read the users hash,
    which no fluxes user may)."""
    from fluxes.store.users import UserTable

    return UserTable(inst.redis, inst.keys).readable()
