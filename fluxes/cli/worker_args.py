"""The command line of a worker process (``python -m workers``, ``fluxes worker``).

Defined here, not in ``workers/``, so that the CLI can offer ``fluxes worker``
with the same options without importing a worker; the worker process itself
is ``python -m workers``.
"""

from __future__ import annotations

import argparse

KINDS = ("ingest", "job-manager", "scheduler", "job-list", "exec", "accounting")
#: Set to 1 by a launcher that was told --insecure, for the workers it starts.
ENV_INSECURE = "FLUXES_INSECURE"


#: ``--metrics-port`` values that mean "no metrics server" (a unit's default can be turned off).
METRICS_OFF = ("off", "none")


def metrics_port(text: str) -> int | None:
    """argparse type: a TCP port for the metrics server (0: any free port; off: none)."""
    from fluxes.proc.metrics import check_port

    if text.strip().lower() in METRICS_OFF:
        return None
    try:
        return check_port(int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"metrics port must be an integer from 0 to 65535 or 'off', got {text!r}") from None


def build_parser(as_parent: bool = False) -> argparse.ArgumentParser:
    """Arguments shared by every worker kind.

    ``as_parent``: for embedding in another parser (``fluxes worker``): no
    ``-h`` of its own, and ``--uri`` sets nothing when absent, so that an
    outer ``--uri`` given before the subcommand stands.
    """
    from fluxes.cli.util import ArgumentParser

    # standalone, usage errors are one line (raised, then reported like any error)
    parser_class = argparse.ArgumentParser if as_parent else ArgumentParser
    parser = parser_class(prog="python -m workers", add_help=not as_parent,
                          description="Run one fluxes worker process.")
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--uri", default=argparse.SUPPRESS if as_parent else None,
                        help="instance URI (default $FLUXES_URI)")
    parser.add_argument("--name", default=None, help="worker name (default KIND-HOST-PID)")
    parser.add_argument("--partition", type=int, default=0, help="job-manager partition")
    parser.add_argument("--ranks", default=None, help="exec: the ranks served (idset)")
    parser.add_argument("--state-dir", default=None, help="exec: where task files live")
    parser.add_argument("--insecure", action="store_true",
                        help="accept a Redis other machines reach without a password or ACL "
                             f"user (also ${ENV_INSECURE}=1)")
    parser.add_argument("--metrics-port", type=metrics_port, default=None, metavar="PORT",
                        help="serve Prometheus metrics on PORT (0: any free port, shown by "
                             "'fluxes status'; off: none, the default)")
    return parser
