"""``fluxes start`` and ``fluxes stop``: a private instance on this machine."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fluxes.cli.util import die, help_with_example, instance
from fluxes.env import DEFAULT_NAMESPACE, ENV_REDIS_URL, ENV_URI
from fluxes.errors import FluxesError

if TYPE_CHECKING:
    from fluxes.proc.launcher import Launcher



def register(subparsers: Any) -> None:
    """Add ``start`` and ``stop``."""
    p = subparsers.add_parser("start", **help_with_example(
        "Start a private instance (its own redis-server unless --redis), run COMMAND in it\n"
        "with FLUXES_URI set, and tear it down when COMMAND exits (like 'flux start').\n"
        "Without COMMAND: --detach leaves it running, otherwise an interactive shell runs.",
        ["fluxes start -- fluxes run -N2 -n4 hostname",
         "fluxes start --nodes 16 --cores-per-node 32 -- ./workload.sh",
         "fluxes start --detach --config site.toml", "fluxes stop"]))
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="simulated nodes")
    p.add_argument("--cores-per-node", type=int, default=4, metavar="C")
    p.add_argument("--gpus-per-node", type=int, default=0, metavar="G")
    p.add_argument("--config", metavar="FILE", help="instance configuration (TOML)")
    p.add_argument("--redis", metavar="URL", default=os.environ.get(ENV_REDIS_URL),
                   help="use this Redis instead of a private one (default $FLUXES_REDIS_URL)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, metavar="NS")
    p.add_argument("--partitions", type=int, default=1, metavar="P",
                   help="job-manager partitions (one leader each)")
    p.add_argument("--state-dir", metavar="DIR",
                   help="where Redis data and logs go, kept afterwards (default: a temporary "
                        "directory, removed when the instance stops, also by 'fluxes stop')")
    p.add_argument("--appendfsync", choices=("always", "everysec", "no"), default="everysec",
                   help="private Redis AOF fsync policy (default everysec)")
    p.add_argument("--detach", action="store_true", help="leave the instance running")
    p.add_argument("--require-auth", action="store_true",
                   help="multi-user: the private Redis asks everyone for a password (the "
                        "owner's is in STATE_DIR/credentials.json); see 'fluxes admin'")
    p.add_argument("--insecure", action="store_true",
                   help="allow a remote --redis without a password")
    p.add_argument("--web", type=int, metavar="PORT",
                   help="also serve 'fluxes web' on 127.0.0.1:PORT (docs/web.md)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    p.set_defaults(func=_start)

    s = subparsers.add_parser("stop", **help_with_example(
        "Stop an instance started with 'fluxes start --detach' (checkpoints written;\n"
        "running tasks are killed; a temporary state directory is removed).",
        ["fluxes stop", "fluxes --uri unix:///tmp/fluxes-x/redis/redis.sock?ns=fx stop"]))
    s.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS")
    s.set_defaults(func=_stop)


def _launcher(args: argparse.Namespace) -> Launcher:
    from fluxes.proc.launcher import Launcher

    if args.redis:
        _check_shared_redis(args)
    config_text = ""
    if args.config:
        try:
            config_text = Path(args.config).read_text()
        except OSError as exc:
            die(f"{args.config}: {exc.strerror}")
    if args.partitions < 1:
        die("--partitions must be >= 1")
    if args.web is not None and not 0 < args.web < 65536:
        die("--web: want a port number 1-65535")
    # the temporary directory last, and gone again if the launcher refuses the
    # arguments: a start refused before it starts leaves nothing behind
    state = Path(args.state_dir) if args.state_dir else Path(tempfile.mkdtemp(prefix="fluxes-"))
    try:
        return Launcher(state_dir=state, nodes=args.nodes, cores_per_node=args.cores_per_node,
                        gpus_per_node=args.gpus_per_node, config_text=config_text,
                        redis_url=args.redis, namespace=args.namespace,
                        partitions=args.partitions, appendfsync=args.appendfsync,
                        require_auth=args.require_auth, web_port=args.web)
    except BaseException:
        if not args.state_dir:
            import shutil

            shutil.rmtree(state, ignore_errors=True)
        raise


def _check_shared_redis(args: argparse.Namespace) -> None:
    """Refuse a Redis other machines reach when nothing keeps strangers out of it."""
    from fluxes.store.security import apply_credentials, shared_redis_problem

    if args.require_auth:
        die("--require-auth protects the private redis-server; a shared Redis (--redis) "
            "needs its own ACL users and passwords")
    url = apply_credentials(args.redis)[0] or args.redis
    problem = shared_redis_problem(url)
    if problem and not args.insecure:
        die(problem)
    if problem:
        # the workers this start runs make the same check: tell them it was waived
        os.environ["FLUXES_INSECURE"] = "1"


def _start(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if args.detach and command:
        die("start: --detach takes no COMMAND")
    launcher = _launcher(args)
    if args.detach:
        return _detach(launcher, temporary=args.state_dir is None)
    if not command:
        command = [os.environ.get("SHELL", "/bin/sh")]
    from fluxes.proc.launcher import run_command

    try:
        launcher.start()
        if launcher.web_port is not None:
            print(f"fluxes: web: http://127.0.0.1:{launcher.web_port}/", file=sys.stderr)
        try:
            return run_command(launcher, command)
        finally:
            launcher.stop()
    finally:
        if args.state_dir is None:
            # a temporary instance leaves nothing behind, as flux start does
            import shutil

            shutil.rmtree(launcher.state_dir, ignore_errors=True)


def _detach(launcher: Launcher, temporary: bool) -> int:
    """Fork a supervisor that outlives this command; print how to reach it.

    A ``temporary`` state directory (one this command made, not ``--state-dir``)
    is removed when the supervisor ends (``fluxes stop``), as after
    ``fluxes start -- COMMAND``.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as pipe:
            message = pipe.read().decode()
        if not message.startswith("ok "):
            die(message.strip() or "the instance failed to start")
        uri, _sep, credentials = message[3:].strip().partition("\n")
        print(f"export {ENV_URI}='{uri}'")
        if credentials:
            from fluxes.store.security import ENV_CREDENTIALS

            print(f"export {ENV_CREDENTIALS}='{credentials}'")
        if launcher.web_port is not None:
            print(f"# web: http://127.0.0.1:{launcher.web_port}/", file=sys.stderr)
        print(f"# state and logs: {launcher.state_dir}"
              + (" (removed by fluxes stop)" if temporary else ""), file=sys.stderr)
        print("# stop it with: fluxes stop", file=sys.stderr)
        return 0
    os.close(read_fd)
    os.setsid()
    stopping = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        started = launcher.start()
    except (FluxesError, OSError, ValueError) as exc:
        os.write(write_fd, str(exc).encode())
        _remove_state(launcher, temporary)
        os._exit(1)
    credentials = f"\n{launcher.credentials}" if launcher.credentials is not None else ""
    os.write(write_fd, f"ok {started}{credentials}".encode())
    os.close(write_fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while not stopping:
        launcher.supervise_once()
        time.sleep(0.2)
    launcher.stop()
    # before exiting: `fluxes stop` returns once this process is gone, and the
    # directory must be gone by then
    _remove_state(launcher, temporary)
    os._exit(0)


def _remove_state(launcher: Launcher, temporary: bool) -> None:
    if temporary:
        import shutil

        shutil.rmtree(launcher.state_dir, ignore_errors=True)


def _stop(args: argparse.Namespace) -> int:
    from fluxes.store.status import instance_facts

    inst = instance(args)
    facts = instance_facts(inst.redis, inst.keys, ("supervisor_pid", "supervisor_host"))
    raw, host = facts.get("supervisor_pid"), facts.get("supervisor_host")
    if host and host != os.uname().nodename:
        die(f"the instance's supervisor runs on {host}: run fluxes stop there")
    if not raw:
        die("this instance has no supervisor to stop (was it started with fluxes start?)")
    pid = int(raw)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        die(f"the supervisor (pid {pid}) is not running on this machine")
    except PermissionError:
        die(f"not allowed to stop the supervisor (pid {pid})")
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        time.sleep(0.1)
    die(f"the instance did not stop within {args.timeout:g}s")
