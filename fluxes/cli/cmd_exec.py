"""``fluxes exec``: run a command on the exec ranks as the instance owner (flux exec).

The command goes to each chosen rank's request stream (a ``command``
message, fluxes/proc/remote_exec.py); each rank's exec worker runs it and
sends back its output and wait status; the output is printed rank by rank
(``-l`` prefixes each line with its rank) and the exit code is the largest
of the ranks' (128 + N for a signal).  Only the instance owner may.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from typing import Any

from fluxes.cli.util import die, help_with_example, instance
from fluxes.proc.spawner import shell_code

#: How long to wait for a rank's answer before saying which ranks did not answer.
DEFAULT_TIMEOUT_S = 600.0


def register(subparsers: Any) -> None:
    """Add ``exec``."""
    ep = subparsers.add_parser("exec", **help_with_example(
        "Run a command on the exec ranks, as the instance owner (flux exec); the exit\n"
        "code is the largest of the ranks'. For administrators: the instance owner only.",
        ["fluxes exec hostname", "fluxes exec -r 0-1 -l uptime",
         "fluxes exec -r 2 -- sh -c 'df -h /tmp'"]))
    ep.add_argument("-r", "--rank", metavar="RANKS", default="all",
                    help="the ranks (an idset, or 'all': every rank of the instance)")
    ep.add_argument("-l", "--label-io", action="store_true", help="prefix lines with the rank")
    ep.add_argument("-d", "--dir", metavar="DIR", default=None,
                    help="working directory of the command (default: the current one)")
    ep.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                    help="give up on ranks that have not answered after this long")
    ep.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    ep.set_defaults(func=_exec)


def _ranks(inst: Any, text: str) -> list[int]:
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory

    known = IDSet(t.rank for t in load_inventory(inst))
    if text == "all":
        return list(known)
    try:
        chosen = IDSet(text)
    except ValueError as exc:
        die(f"exec: -r {text}: {exc}")
    unknown = chosen - known
    if unknown:
        die(f"exec: rank(s) {unknown} not in the instance (it has {known})")
    return list(chosen)


def _offline(inst: Any, ranks: list[int]) -> list[int]:
    """The ranks whose exec worker has not beaten lately (their command would wait)."""
    import time as _time

    from fluxes.store.resources import LOST_AFTER_S, exec_heartbeats

    beats = exec_heartbeats(inst.redis, inst.keys)
    now = _time.time()
    return [r for r in ranks if now - beats.get(r, 0.0) > LOST_AFTER_S]


def _exec(args: argparse.Namespace) -> int:
    from fluxes import messages as proto
    from fluxes.proc.remote_exec import decode_reply
    from fluxes.store.client import Client
    from fluxes.store.exec_command import drop_answers, read_answers, send_command

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        die("exec: no command given (usage: fluxes exec [-r RANKS] COMMAND...)")
    inst = instance(args)
    owner_name, owner_uid = inst.owner()
    if os.getuid() != owner_uid and Client(inst).user != owner_name:
        die(f"exec: only the instance owner ({owner_name}) may run commands on the ranks")
    ranks = _ranks(inst, args.rank)
    offline = _offline(inst, ranks)
    if offline:
        from fluxes.formats.idset import IDSet

        die(f"exec: rank(s) {IDSet(offline)} offline (no exec worker heartbeat)")
    token = secrets.token_hex(12)
    msg = proto.Command(token=token, argv=command, cwd=args.dir or os.getcwd(),
                        env=dict(os.environ))
    send_command(inst.redis, inst.keys, ranks, msg)
    waiting = set(ranks)
    worst = 0
    pos = "0-0"
    deadline = time.monotonic() + args.timeout
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            from fluxes.formats.idset import IDSet

            die(f"exec: no answer from rank(s) {IDSet(waiting)} within {args.timeout:g} s")
        answers = read_answers(inst.redis, inst.keys, token, pos, min(left, 5.0))
        if answers:
            pos = answers[-1][0]
        for _entry, fields in answers:
            rank, status, out, err, error = decode_reply(fields)
            if rank not in waiting:
                continue
            waiting.discard(rank)
            _print_chunk(rank, out, sys.stdout, args.label_io)
            _print_chunk(rank, err, sys.stderr, args.label_io)
            if error:
                print(f"fluxes exec: rank {rank}: {error}", file=sys.stderr)
            worst = max(worst, shell_code(status))
    drop_answers(inst.redis, inst.keys, token)
    return worst


def _print_chunk(rank: int, data: bytes, out: Any, label: bool) -> None:
    if not data:
        return
    text = data.decode("utf-8", "replace")
    if label:
        lines = text.splitlines()
        text = "".join(f"{rank}: {line}\n" for line in lines)
    out.write(text)
    out.flush()

