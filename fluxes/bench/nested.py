"""``fluxes bench nested``: what a child instance costs.

On a private instance of 4 nodes x 4 cores:

* ``first_line_s``: from submitting a ``fluxes batch -N2`` script to the
  script's first line running (the job scheduled, the child's services and
  its two exec workers up, the script started), the median of ``--starts``;
* ``child_jobs_per_s``: ``--jobs`` short jobs submitted with ``--cc`` and
  waited for by a batch script inside a 2-node child, from its first
  submission to the last job's end;
* ``parent_jobs_per_s``: the same script run against the parent itself.

Jobs are simulated (``exec.test.run_duration=1ms``) unless ``real`` (then
``true`` processes), as in ``fluxes bench throughput``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fluxes.formats.jobspec import Jobspec
from fluxes.proc.launcher import Launcher
from fluxes.proc.nested import SCRIPT_ATTRIBUTE, child_environment
from fluxes.store.client import Client
from fluxes.store.instance import Instance

_STAMP = 'python3 -c "import time; print(repr(time.time()))"'


def _script(jobs: int, real: bool, out: Path) -> str:
    """A shell script: submit ``jobs`` short jobs, wait for them, write the seconds."""
    sim = "" if real else "--setattr=exec.test.run_duration=1ms "
    return ("#!/bin/sh\n"
            f"t0=$({_STAMP})\n"
            f"ids=$(fluxes submit --cc=1-{jobs} {sim}true) || exit 1\n"
            "fluxes job wait $ids >/dev/null || exit 2\n"
            f"t1=$({_STAMP})\n"
            f'echo "$t0 $t1" > {out}\n')


def _batch_spec(script: str, nodes: int) -> Jobspec:
    """The jobspec ``fluxes batch -N<nodes>`` builds for ``script``."""
    command = [sys.executable, "-m", "fluxes.cli.main", "instance-child", "--batch", "--"]
    return Jobspec.from_command(command, nnodes=nodes, ntasks=nodes, exclusive=True,
                                cwd=os.getcwd(), environment=dict(os.environ),
                                attributes={"system": {SCRIPT_ATTRIBUTE: {"script": script}}})


def _wait_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text()
            if text.endswith("\n"):
                return text
        time.sleep(0.01)
    raise TimeoutError(f"bench nested: {path.name} not written within {timeout:g}s")


def _rate(text: str, jobs: int) -> float:
    t0, t1 = (float(x) for x in text.split())
    return jobs / max(t1 - t0, 1e-9)


def run(jobs: int = 1000, starts: int = 3, real: bool = False,
        timeout: float = 600.0) -> dict[str, Any]:
    """Start an instance, measure a child's start and its throughput against the parent's."""
    with tempfile.TemporaryDirectory(prefix="fluxes-bench-") as tmp:
        work = Path(tmp)
        launcher = Launcher(state_dir=work / "state", nodes=4, cores_per_node=4)
        uri = launcher.start()
        try:
            inst = Instance.connect(str(uri))
            client = Client(inst)
            firsts = []
            for i in range(starts):
                stamp = work / f"first-{i}"
                first = f"#!/bin/sh\n{_STAMP} > {stamp}\n"
                t0 = time.time()
                [jobid] = client.submit([{"jobspec": _batch_spec(first, 2)}])
                if not isinstance(jobid, int):
                    raise RuntimeError(f"bench nested: submit failed: {jobid}")
                firsts.append(float(_wait_file(stamp, timeout)) - t0)
            out = work / "child"
            [jobid] = client.submit([{"jobspec": _batch_spec(_script(jobs, real, out), 2)}])
            if not isinstance(jobid, int):
                raise RuntimeError(f"bench nested: submit failed: {jobid}")
            child_rate = _rate(_wait_file(out, timeout), jobs)
            out = work / "parent"
            script = work / "parent.sh"
            script.write_text(_script(jobs, real, out))
            script.chmod(0o700)
            subprocess.run([str(script)], env=child_environment(uri, os.environ),
                           check=True, timeout=timeout)
            parent_rate = _rate(_wait_file(out, timeout), jobs)
        finally:
            launcher.stop()
    return {"first_line_s": statistics.median(firsts), "first_line_all_s": firsts,
            "jobs": jobs, "child_jobs_per_s": child_rate, "parent_jobs_per_s": parent_rate,
            "child_vs_parent": child_rate / parent_rate}
