"""Multi-user security, pure: Redis ACL rules for fluxes users, and credentials files.

The model (docs/security.md): every user writes requests only to their own
stream ``{ns}:submit:<user>`` and reads answers only from their own reply
lists; the ingest takes who asked from the stream, never from the request.
Redis ACLs enforce the first half, so this module builds, for one user, the
``ACL SETUSER`` rules that allow exactly that plus read-only access to what
the query commands read: what is public of every job (eventlogs, job hashes,
the journal, the job-list read model, the instance hash, the queue stream,
the scheduler's resource summary) and what is private to the user's own jobs
(jobspec blobs, output), whose keys carry the owner's uid.

A credentials file is a small JSON object, mode 0600::

    {"uri": "redis://alice:PASSWORD@host:6379?ns=fx", "user": "alice"}

``uri`` is the instance URI with the ACL user's name and password; ``user``
(absent for the instance owner) is the fluxes user name the client submits
as. Clients use the file named by ``$FLUXES_CREDENTIALS``, else
``~/.config/fluxes/credentials.json`` when it exists; it applies to the
instance URI when both name the same Redis server, and supplies the URI when
none is given.

Nothing here talks to Redis; :mod:`fluxes.store.acl` sends the rules.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

import orjson

from fluxes.errors import ConfigError
from fluxes.store.keys import Keys

#: Names a credentials file for clients (overrides the per-user default).
ENV_CREDENTIALS = "FLUXES_CREDENTIALS"
#: Where a user's credentials live unless $FLUXES_CREDENTIALS says otherwise.
DEFAULT_CREDENTIALS = Path(".config") / "fluxes" / "credentials.json"

#: fluxes user names: what UNIX allows in practice, minus anything that is
#: special in a key (``:`` separates key parts, ``{}`` are hash tags) or in an
#: ACL glob pattern (``* ? [ ] \\``), so a name can go into a pattern verbatim.
USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: Redis's built-in user: never a fluxes user.
REDIS_DEFAULT_USER = "default"
MAX_UID = 2**32 - 2

#: Connection basics redis-py sends (AUTH needs no permission). SELECT is
#: allowed because key permissions apply in every database alike.
BASIC_COMMANDS = ("ping", "hello", "client|setname", "select")
#: What the query commands (jobs, job info/eventlog/attach, eventlog journal,
#: queue list/status, resource list) send, all on read-only key patterns.
#: XINFO GROUPS of a journal tells how far the job list has folded it, so that
#: ``fluxes jobs`` run by a user waits for it too (read your writes).
READ_COMMANDS = ("exists", "get", "xrange", "xrevrange", "xread", "xlen", "xinfo|groups",
                 "hget", "hmget", "hgetall", "hlen", "hvals", "smembers", "zrange", "zrevrange")
#: Sending a request: XADD to the user's own submit stream, nothing else
#: there (a user who could DEL or recreate the stream would break the
#: ingest's consumer group for everyone).
SUBMIT_COMMANDS = ("xadd",)
#: Waiting for an answer on the user's own reply lists.
REPLY_COMMANDS = ("blpop", "lpop", "del")

#: Random bytes in a generated password (256 bits).
_PASSWORD_BYTES = 32


def check_user_name(name: str) -> str:
    """``name`` if it can be a fluxes user name; ValueError (one line) if not."""
    if not USER_NAME.fullmatch(name):
        raise ValueError(f"bad user name {name!r}: use letters, digits, '_', '.', '-' "
                         "(at most 64, not starting with '.' or '-')")
    if name == REDIS_DEFAULT_USER:
        raise ValueError("'default' is Redis's built-in user, not a fluxes user name")
    return name


def check_uid(uid: int) -> int:
    """``uid`` if it is a valid UNIX user id; ValueError if not."""
    if isinstance(uid, bool) or not isinstance(uid, int) or not 0 <= uid <= MAX_UID:
        raise ValueError(f"bad uid {uid!r}: want an integer 0-{MAX_UID}")
    return uid


def glob_escape(text: str) -> str:
    """``text`` as a literal inside a Redis glob pattern (``* ? [ ] \\`` escaped).

    Braces are not special in Redis patterns, so the hash tags of key names
    (``{fx}``) need no escaping; only a namespace could hold glob characters.
    """
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def generate_password() -> str:
    """A fresh random password (URL-safe, so it goes into a URI unquoted)."""
    import secrets  # here: connecting needs none of these (start-up time)

    return secrets.token_urlsafe(_PASSWORD_BYTES)


def password_hash(password: str) -> str:
    """The SHA-256 hex digest Redis stores for ``password`` (``#<hash>`` in ACL rules)."""
    import hashlib

    return hashlib.sha256(password.encode()).hexdigest()


def _partition_tag_pattern(keys: Keys) -> str:
    """A pattern matching every partition's hash tag of ``keys``."""
    ns = glob_escape(keys.ns)
    if keys.partitions == 1:
        return f"{{{ns}}}"
    # every partition key is {ns:p<k>}; one pattern instead of one per partition
    return f"{{{ns}:p*}}"


def read_patterns(keys: Keys, uid: int) -> list[str]:
    """Key patterns the user of ``uid`` may read: what is public of every job (eventlogs,
    job hashes, the journal, the read models, instance facts) and what is private to
    the user's own jobs (jobspec blobs, output), whose keys carry the owner's uid."""
    p = _partition_tag_pattern(keys)
    g = f"{{{glob_escape(keys.ns)}}}"
    uid = check_uid(uid)
    return [
        f"{p}:job:*",  # job hashes {p}:job:<id> (no jobspec: blob digests) and eventlogs
        f"{p}:blob:{uid}:*",  # own jobspec blobs {p}:blob:<owner uid>:<digest>
        f"{p}:private:{uid}:*",  # own jobs' notes, dependencies, cwd {p}:private:<uid>:<id>
        f"{p}:journal",
        f"{p}:jl:*",  # the job-list read model
        f"{p}:acct:*",  # the usage read model
        f"{g}:output:{uid}:*",  # own jobs' output {ns}:output:<owner uid>:<id>
        f"{g}:pmi:{uid}:*",  # own jobs' PMI exchange {ns}:pmi:<owner uid>:<id>
        f"{g}:instance",
        f"{g}:queues",
        f"{g}:accounting",
        f"{g}:sched:status",
    ]


def submit_pattern(keys: Keys, user: str) -> str:
    """The one key ``user`` may write requests to (their submit stream)."""
    return glob_escape(keys.submit(check_user_name(user)))


def reply_pattern(keys: Keys, user: str) -> str:
    """The pattern of ``user``'s reply lists."""
    return glob_escape(keys.reply(check_user_name(user), "")) + "*"


def user_acl_rules(keys: Keys, user: str, uid: int, password: str) -> list[str]:
    """The ``ACL SETUSER <user>`` arguments that make ``user`` (uid ``uid``) a fluxes user
    of ``keys``.

    The rules start with ``reset``, so applying them again (a new password)
    leaves nothing of an older definition behind. The root permissions allow
    the basics and the read commands on :func:`read_patterns` only (``%R~``:
    read, not write), which name the user's own private keys by ``uid``; two
    selectors pair XADD with the user's submit stream and the list commands
    with the user's reply lists, so that neither command reaches any other key.
    """
    if not password:
        raise ValueError("an ACL user needs a password")
    rules = ["reset", "on", f"#{password_hash(password)}", "resetchannels"]
    rules += [f"+{cmd}" for cmd in (*BASIC_COMMANDS, *READ_COMMANDS)]
    rules += [f"%R~{pattern}" for pattern in read_patterns(keys, uid)]
    submit = " ".join([*(f"+{c}" for c in SUBMIT_COMMANDS), f"%W~{submit_pattern(keys, user)}"])
    reply = " ".join([*(f"+{c}" for c in REPLY_COMMANDS), f"~{reply_pattern(keys, user)}"])
    rules += [f"({submit})", f"({reply})"]
    return rules


#: ACL user names of child instances start with this; a fluxes user name never holds
#: ``:``, so no user can be mistaken for a child's identity (or take its name).
CHILD_USER_PREFIX = "child:"
#: What a child's identity may not run although its workers run most commands: server
#: administration and everything that ignores key permissions or reaches beyond the
#: child's keys (FLUSHALL, KEYS, INFO, CONFIG, ACL...: ``@dangerous``), publishing,
#: listing key names (SCAN, RANDOMKEY), the server's memory report (MEMORY STATS,
#: DOCTOR), and Lua of its own: no EVAL, EVALSHA or SCRIPT (a busy loop would stall
#: every user's Redis), no FUNCTION (loading, deleting, killing functions). Our steps
#: are Redis functions the instance owner loaded; the identity calls them (FCALL).
CHILD_DENIED = ("-@admin", "-@dangerous", "-@pubsub", "-scan", "-randomkey", "-memory",
                "-function", "-script", "-eval", "-evalsha", "-eval_ro", "-evalsha_ro")


def child_user_name(child_ns: str, rank: int) -> str:
    """The ACL user of child instance ``child_ns``'s part on parent rank ``rank``."""
    if rank < 0:
        raise ValueError(f"child identity: rank must be >= 0, got {rank}")
    return f"{CHILD_USER_PREFIX}{Keys(child_ns).ns}:{rank}"


def parse_child_user(name: str) -> tuple[str, int] | None:
    """(child namespace, parent rank) of a child identity's ACL user name; None otherwise."""
    if not name.startswith(CHILD_USER_PREFIX):
        return None
    ns, sep, rank = name[len(CHILD_USER_PREFIX):].rpartition(":")
    if not sep or not ns or not rank.isdigit():
        return None
    return ns, int(rank)


def child_key_patterns(child_ns: str) -> list[str]:
    """Key patterns a child instance's identity may read and write: every key of the child
    (one partition, so one hash tag ``{child}``) and of the instances it runs in turn
    (``{child.<job id>}``, ``{child.<job id>:p<k>}``, deeper levels alike)."""
    ns = glob_escape(Keys(child_ns).ns)
    return [f"{{{ns}}}:*", f"{{{ns}.[0-9]*"]


def child_parent_read_patterns(parent: Keys, jobid: int, uid: int) -> list[str]:
    """Keys of the parent a child's identity may only read: the instance facts, the hash
    of the job running the child (its R, owner, blob digests) and the job owner's
    jobspec blobs, which the user's own identity reads too."""
    p = glob_escape(parent.p(parent.partition_of(jobid)))
    return [glob_escape(parent.instance), glob_escape(parent.job(jobid)),
            f"{p}:blob:{check_uid(uid)}:*"]


def child_acl_rules(parent: Keys, jobid: int, uid: int, child_ns: str,
                    password: str) -> list[str]:
    """The ``ACL SETUSER`` arguments of the identity a child instance (run by job ``jobid``
    of user ``uid`` in ``parent``) works with: its workers' commands on the child's keys
    (:func:`child_key_patterns`), read-only access to :func:`child_parent_read_patterns`,
    nothing else of the parent's, and none of :data:`CHILD_DENIED`.

    Like :func:`user_acl_rules` the rules start with ``reset``. No selectors: ``%R~``
    keys refuse every write command, so one set of permissions says it all.
    """
    if not password:
        raise ValueError("an ACL user needs a password")
    rules = ["reset", "on", f"#{password_hash(password)}", "resetchannels", "+@all",
             *CHILD_DENIED]
    rules += [f"~{pattern}" for pattern in child_key_patterns(child_ns)]
    rules += [f"%R~{pattern}" for pattern in child_parent_read_patterns(parent, jobid, uid)]
    return rules


def owner_acl_rules(password: str) -> list[str]:
    """``ACL SETUSER default`` arguments: full access, but only with ``password``."""
    if not password:
        raise ValueError("the instance owner needs a password")
    return ["on", "resetpass", f"#{password_hash(password)}", "~*", "&*", "+@all"]


def without_default_user(acl_file_text: str) -> str:
    """An ACL file's text without its ``default`` user line.

    Redis then recreates ``default`` without a password when it loads the
    file, which is what ``fluxes start --require-auth`` needs for the moment
    between starting its private redis-server (socket still owner-only) and
    setting the password again.
    """
    lines = acl_file_text.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith(f"user {REDIS_DEFAULT_USER} "))


# ---------------------------------------------------------------- URLs


def _split_url(url: str) -> tuple[str, str, str, str]:
    """``scheme://userinfo@hosts/rest`` -> (scheme, userinfo, hosts, rest); no checks."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a Redis URL: {url!r}")
    end = len(rest)
    for ch in "/?#":
        pos = rest.find(ch)
        if pos >= 0:
            end = min(end, pos)
    netloc, tail = rest[:end], rest[end:]
    userinfo, at, hosts = netloc.rpartition("@")
    return scheme.lower(), userinfo if at else "", hosts, tail


def url_credentials(url: str) -> tuple[str | None, str | None]:
    """The (username, password) a Redis URL carries, None where absent."""
    _scheme, userinfo, _hosts, tail = _split_url(url)
    user = password = None
    if userinfo:
        name, colon, secret = userinfo.partition(":")
        user = unquote(name) or None
        password = unquote(secret) if colon and secret else None
    # redis-py also takes ?password= in the query
    query = tail.partition("?")[2].partition("#")[0]
    for item in query.split("&"):
        key, _eq, value = item.partition("=")
        if key == "password" and value:
            password = unquote(value)
    return user, password


def with_userinfo(url: str, user: str | None, password: str | None) -> str:
    """``url`` with its user name and password replaced (both None: removed)."""
    scheme, _userinfo, hosts, tail = _split_url(url)
    info = ""
    if user is not None or password is not None:
        info = quote(user or "", safe="")
        if password is not None:
            info += ":" + quote(password, safe="")
        info += "@"
    return f"{scheme}://{info}{hosts}{tail}"


def strip_password(url: str) -> str:
    """``url`` without user name and password (safe to show or put on a command line)."""
    return with_userinfo(url, None, None)


_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "redis+sentinel": 26379,
                  "rediss+sentinel": 26379, "redis+cluster": 6379, "rediss+cluster": 6379}


def server_of(url: str) -> tuple[str, ...]:
    """What identifies the Redis server(s) a URL names: socket path, or hosts and ports.

    Used to decide whether a credentials file belongs to an instance URI;
    the namespace, database and options do not matter (one server, one set
    of ACL users).
    """
    scheme, _userinfo, hosts, tail = _split_url(url)
    if scheme == "unix":
        path = unquote(tail.partition("?")[0].partition("#")[0])
        return ("unix", os.path.normpath(path) if path else "")
    default = _DEFAULT_PORTS.get(scheme, 6379)
    out = []
    for host in hosts.lower().split(","):
        bare = host.rpartition("]")[2] if host.startswith("[") else host
        out.append(host if ":" in bare else f"{host}:{default}")
    return (scheme.replace("rediss", "redis"), *sorted(out))


_LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def is_local_url(url: str) -> bool:
    """True when ``url`` is a unix socket or only names this machine's loopback."""
    scheme, _userinfo, hosts, _tail = _split_url(url)
    if scheme == "unix":
        return True
    for host in hosts.lower().split(","):
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if name not in _LOCAL_HOSTS and not name.startswith("127."):
            return False
    return bool(hosts)


def shared_redis_problem(url: str) -> str | None:
    """Why ``url`` is unsafe for an instance (a remote Redis without password), or None."""
    if is_local_url(url) or url_credentials(url)[1]:
        return None
    return (f"a password or ACL user is required for a shared Redis: {strip_password(url)} "
            "(put it in the URL or a credentials file, or pass --insecure)")


# ---------------------------------------------------------------- credentials files


@dataclass(frozen=True)
class Credentials:
    """What a credentials file holds."""

    uri: str  # the instance URI, with user name and password
    user: str | None = None  # the fluxes user to submit as (None: the UNIX user)
    path: Path | None = None

    def to_json(self) -> bytes:
        """The file's content."""
        obj: dict[str, str] = {"uri": self.uri}
        if self.user is not None:
            obj["user"] = self.user
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"


def parse_credentials(data: bytes, where: str = "credentials") -> Credentials:
    """Parse a credentials file's content; ConfigError (one line) if malformed."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: want a JSON object with 'uri'")
    uri = obj.get("uri")
    user = obj.get("user")
    if not isinstance(uri, str) or "://" not in uri:
        raise ConfigError(f"{where}: 'uri' must be an instance URI")
    if user is not None:
        if not isinstance(user, str):
            raise ConfigError(f"{where}: 'user' must be a string")
        try:
            check_user_name(user)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    unknown = sorted(set(obj) - {"uri", "user"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: uri, user)")
    return Credentials(uri, user)


def credentials_path(environ: Mapping[str, str] | None = None,
                     home: Path | None = None) -> Path | None:
    """The credentials file to use: $FLUXES_CREDENTIALS, else the per-user default if it exists.

    A file named by the variable must exist (a typo must not silently mean
    "no credentials"); an empty variable turns credentials off.
    """
    env = os.environ if environ is None else environ
    named = env.get(ENV_CREDENTIALS)
    if named is not None:
        if not named:
            return None
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(f"{ENV_CREDENTIALS}={named}: no such file")
        return path
    try:
        base = home if home is not None else Path.home()
    except RuntimeError:
        return None  # no home directory: no per-user default
    path = base / DEFAULT_CREDENTIALS
    return path if path.is_file() else None


def load_credentials(path: Path) -> Credentials:
    """Read a credentials file; ConfigError if unreadable, malformed or readable by others."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    # like ssh with private keys: a password others can read is no secret
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: credentials readable by others (mode "
                          f"{stat.S_IMODE(mode):04o}); chmod 600 it")
    creds = parse_credentials(data, str(path))
    return Credentials(creds.uri, creds.user, path)


def write_credentials(path: Path, creds: Credentials, uid: int | None = None,
                      gid: int | None = None) -> None:
    """Write ``creds`` to ``path`` atomically, mode 0600; chown to ``uid``/``gid`` when root.

    Directories created on the way are 0700 and chowned alike, so a file in
    a user's home ends up entirely theirs.
    """
    owner = (uid, -1 if gid is None else gid) if uid is not None and os.geteuid() == 0 \
        else None
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700)
        if owner is not None:
            os.chown(directory, *owner)
    # a temporary file, 0600 from its creation, renamed into place: the
    # password is never in a file others can read, nor in a half-written one
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            if owner is not None:
                os.fchown(f.fileno(), *owner)
            f.write(creds.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def apply_credentials(uri: str | None, environ: Mapping[str, str] | None = None,
                      home: Path | None = None) -> tuple[str | None, str | None]:
    """The URI to connect with and the fluxes user name, after consulting credentials.

    ``uri`` is what the caller was told (option or environment). With no
    credentials file, or one for another Redis server, it is returned
    unchanged; with no ``uri``, the file's URI is used; when both name the
    same server, the file's user name and password go into ``uri`` (unless
    it carries a password of its own). The second item is the file's fluxes
    user, when the file applied and names one.
    """
    path = credentials_path(environ, home)
    if path is None:
        return uri, None
    creds = load_credentials(path)
    if uri is None:
        return creds.uri, creds.user
    try:
        if url_credentials(uri)[1] is not None or server_of(uri) != server_of(creds.uri):
            return uri, None
    except ValueError:
        return uri, None  # not a URL we can compare: the connection will say what is wrong
    user, password = url_credentials(creds.uri)
    return with_userinfo(uri, user, password), creds.user
