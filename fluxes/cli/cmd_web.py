"""``fluxes web``: serve the instance's web pages and their JSON API (docs/web.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fluxes.cli.util import die, help_with_example, instance


def register(subparsers: Any) -> None:
    """Add ``web``."""
    p = subparsers.add_parser("web", **help_with_example(
        "Serve the instance in a browser: the machine, queues, jobs, a job's life, a Gantt\n"
        "chart and usage, as they are or at any past moment, with a JSON API behind every\n"
        "page. Stateless: run several behind a load balancer (they share [web] secret).",
        ["fluxes web", "fluxes web --listen 0.0.0.0:8080 --secret-file /etc/fluxes/web.key",
         "fluxes web --listen 127.0.0.1:0 --insecure-dev"]))
    p.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8080; port 0: any free port)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="the session secret (default: [web] secret-file or secret of the "
                        "instance configuration)")
    p.add_argument("--insecure-dev", action="store_true",
                   help="without a configured secret, make a random one for this process")
    p.add_argument("--secure-cookies", action="store_true",
                   help="send cookies over HTTPS only (behind a TLS proxy)")
    p.add_argument("--name", help=argparse.SUPPRESS)  # given by fluxes start, like workers
    p.set_defaults(func=_web)


def _web(args: argparse.Namespace) -> int:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        die("web: the web server's packages are missing: pip install 'fluxes[web]'")
    from fluxes.web.server import parse_listen, serve, session_secret

    parse_listen(args.listen)  # a typo fails before connecting
    inst = instance(args)
    config = inst.config()
    secret_file = args.secret_file
    if not (secret_file or config.web.secret or config.web.secret_file or args.insecure_dev):
        secret_file = _state_dir_secret(inst.uri.redis_url)
    secret, warning = session_secret(config, secret_file, args.insecure_dev)
    if warning:
        print(f"fluxes {warning}", file=sys.stderr)
    return serve(inst, args.listen, secret, secure_cookies=args.secure_cookies)


def _state_dir_secret(redis_url: str) -> str | None:
    """Inside a private instance its owner runs, the secret of its state directory
    (the one ``fluxes start --web`` uses, made now if it has none yet)."""
    from fluxes.proc.state_dir import private_state_dir, web_secret_file
    from fluxes.store.security import generate_password

    state = private_state_dir(redis_url)
    return None if state is None else str(web_secret_file(state, generate_password()))
