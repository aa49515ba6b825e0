"""Running ``fluxes web``: its session secret, where it listens, the HTTP server."""

from __future__ import annotations

import os
import secrets
import socket
import stat
import sys

from fluxes.config import MIN_WEB_SECRET, InstanceConfig
from fluxes.errors import ConfigError, FluxesError
from fluxes.store.instance import Instance

#: Where ``fluxes web`` listens unless ``--listen`` says otherwise.
DEFAULT_LISTEN = "127.0.0.1:8080"


def read_secret_file(path: str) -> str:
    """The secret a file holds (stripped); ConfigError when it is unreadable, too short,
    or readable by others (like a credentials file)."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            text = f.read().decode("utf-8", "replace").strip()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the web secret is readable by others (mode "
                          f"{stat.S_IMODE(mode):04o}); chmod 600 it")
    if len(text) < MIN_WEB_SECRET:
        raise ConfigError(f"{path}: the web secret needs at least {MIN_WEB_SECRET} characters")
    return text


def session_secret(config: InstanceConfig, secret_file: str | None = None,
                   insecure_dev: bool = False) -> tuple[str, str | None]:
    """The secret that signs session cookies, and a warning to print when there is one.

    ``--secret-file`` first, then ``[web] secret-file``, then ``[web] secret``; with
    none, ``insecure_dev`` makes a random one for this process (sessions then end with
    it and are not shared with other servers), and otherwise it is an error.
    """
    path = secret_file or config.web.secret_file
    if path:
        return read_secret_file(path), None
    if config.web.secret:
        return config.web.secret, (
            "warning: [web] secret is in the stored configuration, which every user of the "
            "instance can read; prefer [web] secret-file")
    if insecure_dev:
        return secrets.token_urlsafe(32), (
            "warning: --insecure-dev: a random session secret for this process only "
            "(logins end with it and do not carry over to other servers)")
    raise FluxesError(
        "web: no session secret: add [web] secret-file = \"PATH\" (a file of at least "
        f"{MIN_WEB_SECRET} random characters, mode 0600) to the instance configuration, "
        "or pass --secret-file FILE (or --insecure-dev to try it out)")


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--listen: want HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--listen: port {number} is out of range")
    return host, number


def serve(server: Instance, listen: str, secret: str, secure_cookies: bool = False) -> int:
    """Serve the instance on ``listen`` until SIGTERM or SIGINT; print where it listens
    (port 0: a free port, said in that line) on stderr once it does."""
    import uvicorn

    from fluxes.proc.logs import setup_logging
    from fluxes.web.app import create_app

    setup_logging("fluxes.web")
    host, port = parse_listen(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise FluxesError(f"web: cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
    app = create_app(server, secret, secure_cookies=secure_cookies, freeze=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=3, proxy_headers=False)
    print(f"fluxes web: listening on http://{shown}:{bound[1]}/", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0

