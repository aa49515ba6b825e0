"""Batch scripts, allocations and nested instances on a real 4 nodes x 4 cores instance:
a batch job's steps run in a child instance inside its allocation, which the parent
never sees; the script's exit code is the job's; canceling the job ends the child."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from fluxes.cli.main import main
from fluxes.formats.jobid import parse
from fluxes.formats.rset import ResourceSet
from fluxes.proc.launcher import Launcher
from fluxes.proc.nested import STOPPED
from fluxes.store import jobfacts
from fluxes.store.instance import Instance, InstanceURI
from fluxes.store.jobhash import JobHashes

pytestmark = pytest.mark.system

FLUXES = os.path.join(os.path.dirname(sys.executable), "fluxes")


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    """This module's instance: 4 nodes x 4 cores, a 2 s kill grace."""
    from tests.system.conftest import running_instance

    with running_instance(nodes=4) as inst:
        yield inst


def batch(uri: str, capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert main(["--uri", uri, "batch", *args]) == 0
    return parse(capsys.readouterr().out.strip().splitlines()[-1])


def eventlog(inst: Instance, jobid: int) -> list[tuple[str, dict[str, object]]]:
    out = []
    [entries] = jobfacts.eventlogs(inst.redis, inst.keys, [jobid])
    for _id, fields in entries:
        out.append((fields[b"n"].decode(), orjson.loads(fields.get(b"c", b"{}"))))
    return out


def wait_ended(inst: Instance, jobid: int, timeout: float = 60) -> list[tuple[str, dict]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = eventlog(inst, jobid)
        if any(name == "clean" for name, _ in events):
            return events
        time.sleep(0.1)
    raise AssertionError(f"job {jobid} did not end: {eventlog(inst, jobid)}")


def parent_of(launcher: Launcher) -> Instance:
    assert launcher.uri is not None, "the launcher has not started"
    return Instance(launcher.uri)


def child_of(inst: Instance, jobid: int) -> Instance:
    ns = inst.redis.hget(inst.keys.children, str(jobid))
    assert ns is not None, "the batch job recorded no child instance"
    return Instance(InstanceURI(inst.uri.redis_url, ns.decode()))


def child_jobs(child: Instance) -> list[int]:
    """Every job the child's journal saw."""
    ids = set()
    for _id, fields in child.redis.xrange(child.keys.journal(0)):
        if b"j" in fields:
            ids.add(int(fields[b"j"]))
    return sorted(ids)


def hosts_of(inst: Instance, jobid: int) -> set[str]:
    job = JobHashes(inst.redis, inst.keys).get(jobid)
    assert job is not None and job.R is not None
    rset = ResourceSet(job.R)
    return {rset.hostname(r) or "" for r in rset.ranks}


def test_batch_steps_run_in_the_allocation_and_the_exit_code_is_the_scripts(
        launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    parent = parent_of(launcher)
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/sh\n#FLUX: -N2\n#FLUX: --job-name=steps\n"
                      "echo first line\n"
                      "fluxes run -N2 -n2 hostname || exit 90\n"
                      "ids=$(fluxes submit --cc=1-10 true) || exit 91\n"
                      "fluxes job wait $ids || exit 92\n"
                      "exit ${1:-0}\n")
    out = tmp_path / "out-{{id}}.txt"
    good = batch(uri, capsys, f"--output={out}", str(script))
    bad = batch(uri, capsys, f"--output={out}", str(script), "7")
    for jobid, code in ((good, 0), (bad, 7)):
        events = wait_ended(parent, jobid)
        finish = next(c for n, c in events if n == "finish")
        assert finish["status"] == code << 8, events
        text = Path(str(out).replace("{{id}}", _f58(jobid))).read_text()
        assert text.startswith("first line\n")
        child = child_of(parent, jobid)
        steps = child_jobs(child)
        assert len(steps) == 11  # the run and the ten submitted
        allocated = hosts_of(parent, jobid)
        assert len(allocated) == 2
        for step in steps:
            assert hosts_of(child, step) <= allocated
            assert any(n == "clean" for n, _ in eventlog(child, step))
        assert child.redis.hget(child.keys.instance, STOPPED) is not None
        assert child.owner()[1] == os.getuid()
    assert main(["--uri", uri, "job", "wait", str(good)]) == 0
    # the parent's journal names the batch jobs only, never a step
    seen = {int(f[b"j"]) for _i, f in parent.redis.xrange(parent.keys.journal(0)) if b"j" in f}
    assert {good, bad} <= seen
    for jobid in (good, bad):
        assert not set(child_jobs(child_of(parent, jobid))) & seen
    capsys.readouterr()
    # jobs -R lists each child's jobs indented under its batch job; pstree shows the tree
    assert main(["--uri", uri, "jobs", "-a", "-R", "-n", "-o", "{id.dec} {name}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    top = lines.index(f"{good} steps")
    under = [line.strip().split()[0] for line in lines[top + 1:top + 12]]
    assert sorted(map(int, under)) == child_jobs(child_of(parent, good))
    assert all(line.startswith("  ") for line in lines[top + 1:top + 12])
    # with --json each batch job holds its child's jobs in its "jobs" list, as flux's;
    # -L 0 means no limit, and a level below the first keeps them out
    assert main(["--uri", uri, "jobs", "-a", "-R", "--json", "-L", "0"]) == 0
    listed = {j["id"]: j for j in orjson.loads(capsys.readouterr().out)["jobs"]}
    assert sorted(j["id"] for j in listed[good]["jobs"]) == child_jobs(child_of(parent, good))
    assert main(["--uri", uri, "jobs", "-a", "-R", "-L", "1", "--name", "steps", "-n",
                 "-o", "{id.dec}"]) == 0
    assert len(capsys.readouterr().out.split()) == 2 + 2 * 11  # both batch jobs and steps
    assert main(["--uri", uri, "jobs", "-a", "-n", "-o", "{id.dec}:{instance_stats}"]) == 0
    marked = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())
    assert marked[str(good)] == "0 running, 0 pending, 11 inactive (ended)"
    # flux's instance.* fields, the children read by several threads
    assert main(["--uri", uri, "jobs", "-a", "-n", "--threads", "4", "-o",
                 "{id.dec}|{instance.stats}|{instance.stats.total}|{instance.progress!P}|"
                 "{instance.resources.all.ncores}"]) == 0
    marked = dict(line.split("|", 1) for line in capsys.readouterr().out.splitlines())
    stats, total, progress, cores = marked[str(good)].split("|")
    assert (stats, total, progress) == ("PD:0 R:0 CD:11 F:0", "11", "100%")
    assert cores.isdigit() and int(cores) > 0
    # --recurse-all is -R into every user's jobs (here all are ours: the same listing)
    assert main(["--uri", uri, "jobs", "-a", "--recurse-all", "-L", "1", "--name", "steps",
                 "-n", "-o", "{id.dec}"]) == 0
    assert len(capsys.readouterr().out.split()) == 2 + 2 * 11
    assert main(["--uri", uri, "jobs", "-a", "-n", "-o", "{id.dec} {uri}"]) == 0
    uris = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    assert InstanceURI.parse(uris[str(good)]).ns == child_of(parent, good).keys.ns
    assert main(["--uri", uri, "pstree"]) == 0
    assert capsys.readouterr().out == ".\n"  # both children have ended
    assert main(["--uri", uri, "pstree", "-a"]) == 0
    tree = capsys.readouterr().out
    assert f"{_f58(good)}: 0 running, 0 pending, 11 inactive (ended)" in tree


def _f58(jobid: int) -> str:
    from fluxes.formats.jobid import encode

    return encode(jobid, "f58")


def _processes_with(word: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if word in cmdline:
            found.append(cmdline)
    return found


def test_canceling_a_batch_job_ends_its_child_and_every_step(
        launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    parent = parent_of(launcher)
    script = tmp_path / "long.sh"
    script.write_text("#!/bin/sh\n#SBATCH -N 2 -J long\n"
                      "fluxes submit -N1 sleep 3171\nfluxes submit -N1 sleep 3171\n"
                      "sleep 3172\n")
    jobid = batch(uri, capsys, f"--output={tmp_path}/long.out", str(script))
    deadline = time.monotonic() + 60
    child = None
    while time.monotonic() < deadline:
        if parent.redis.hexists(parent.keys.children, str(jobid)):
            child = child_of(parent, jobid)
            if _processes_with("sleep 3171 ").count("sleep 3171 ") == 2:
                break
        time.sleep(0.1)
    assert child is not None and _processes_with("sleep 3171 ").count("sleep 3171 ") == 2
    # proxy connects a command to the running child: it sees the steps, the parent does not
    env = dict(os.environ, FLUXES_URI=uri)
    done = subprocess.run([FLUXES, "proxy", str(jobid), "fluxes", "jobs", "-n", "-o",
                           "{name} {nnodes}"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "sleep 1\nsleep 1\n"), done.stderr
    assert main(["--uri", uri, "cancel", str(jobid)]) == 0
    events = wait_ended(parent, jobid)
    assert any(n == "exception" and c.get("type") == "cancel" for n, c in events)
    deadline = time.monotonic() + 10

    def child_workers() -> list[str]:
        return [p for p in _processes_with(f"ns={child.keys.ns}") if "workers" in p]

    while time.monotonic() < deadline and (_processes_with("sleep 317") or child_workers()):
        time.sleep(0.1)
    assert not _processes_with("sleep 317")
    assert not child_workers()
    steps = child_jobs(child)
    assert len(steps) == 2
    for step in steps:
        assert any(n == "exception" for n, _ in eventlog(child, step)), eventlog(child, step)


def test_alloc_runs_a_command_in_a_new_allocation(launcher: Launcher) -> None:
    env = dict(os.environ, FLUXES_URI=str(launcher.uri))
    done = subprocess.run([FLUXES, "alloc", "-N1", "--", "sh", "-c",
                           "fluxes run hostname && fluxes jobs -a -n -o '{nnodes}' && exit 4"],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=90, check=False)
    assert done.returncode == 4, done.stderr
    assert done.stdout.splitlines() == [os.uname().nodename, "1"]
    parent = parent_of(launcher)
    children = parent.redis.hgetall(parent.keys.children)
    assert children  # the allocation was an instance, and it ended
    for jobid in children:
        wait_ended(parent, int(jobid))


def test_alloc_reads_commands_piped_on_stdin(launcher: Launcher) -> None:
    env = dict(os.environ, FLUXES_URI=str(launcher.uri), SHELL="/bin/sh")
    done = subprocess.run([FLUXES, "alloc", "-N1"], env=env, capture_output=True, text=True,
                          input="fluxes run hostname\nfluxes jobs -a -n -o '{nnodes}'\n",
                          timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [os.uname().nodename, "1"]


def _wait_file(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_signal_to_an_alloc_job_reaches_its_jobs_and_its_end_ends_the_shell(
        launcher: Launcher, tmp_path: Path) -> None:
    env = dict(os.environ, FLUXES_URI=str(launcher.uri))
    work = tmp_path / "work.sh"
    work.write_text(f"#!/bin/sh\ntrap 'echo usr1 >> {tmp_path}/got' USR1\n"
                    f"touch {tmp_path}/ready\nwhile :; do sleep 0.1; done\n")
    work.chmod(0o755)
    alloc = subprocess.Popen(
        [FLUXES, "alloc", "-N1", "--job-name=sigalloc", "--", "sh", "-c",
         f"fluxes submit {work} > /dev/null && sleep 120"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        _wait_file(tmp_path / "ready", alloc)
        parent = parent_of(launcher)
        [jobid] = [int(j) for j, _ns in parent.redis.hgetall(parent.keys.children).items()
                   if parent.redis.hget(parent.keys.job(int(j)), b"result") is None]
        # the signal goes to the alloc job's tasks: its leader forwards it to the
        # child's jobs, and the allocation goes on
        assert main(["--uri", str(launcher.uri), "job", "killall", "-f", "-s", "USR1"]) == 0
        _wait_file(tmp_path / "got", alloc)
        # the allocation goes on: it still runs a job
        done = subprocess.run([FLUXES, "proxy", str(jobid), "fluxes", "run", "true"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert alloc.poll() is None
        assert not any(n == "finish" for n, _ in eventlog(parent, jobid))
        # the allocation ending under the shell: alloc says so and exits
        assert main(["--uri", str(launcher.uri), "cancel", str(jobid)]) == 0
        _out, err = alloc.communicate(timeout=60)
        assert alloc.returncode != 0
        assert "the allocation ended" in err, err
    finally:
        if alloc.poll() is None:
            alloc.kill()
            alloc.wait()


def test_alloc_bg_leaves_the_allocation_running(launcher: Launcher) -> None:
    env = dict(os.environ, FLUXES_URI=str(launcher.uri))
    done = subprocess.run([FLUXES, "alloc", "--bg", "-N1"], env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    jobid = parse(done.stdout.strip())
    inside = subprocess.run([FLUXES, "proxy", str(jobid), "fluxes", "run", "hostname"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert inside.stdout == os.uname().nodename + "\n", inside.stderr
    assert main(["--uri", str(launcher.uri), "cancel", str(jobid)]) == 0
    wait_ended(parent_of(launcher), jobid)
    refused = subprocess.run([FLUXES, "alloc", "--bg", "-N1", "hostname"], env=env,
                             capture_output=True, text=True, timeout=30, check=False)
    assert refused.returncode == 2 and "--bg runs no COMMAND" in refused.stderr


def test_top_shows_a_batch_job_and_descends_into_its_child_under_tmux(
        launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed, and CI is set")
        pytest.skip("tmux is not installed")
    uri = str(launcher.uri)
    parent = parent_of(launcher)
    script = tmp_path / "top.sh"
    script.write_text("#!/bin/sh\nfluxes submit --job-name=inner sleep 3174\nsleep 3175\n")
    jobid = batch(uri, capsys, "-N1", f"--output={tmp_path}/top.out", str(script))
    tmux = ["tmux", "-u", "-L", f"fluxes-test-{os.getpid()}"]
    command = " ".join(["env", f"FLUXES_URI='{uri}'",
                        f"PYTHONPATH='{os.environ.get('PYTHONPATH', '')}'",
                        FLUXES, "top", "--interval", "0.3"])

    def screen(*wants: str) -> str:
        """The pane once it shows everything wanted (the view refreshes every 0.3 s)."""
        deadline = time.monotonic() + 60
        text = ""
        while time.monotonic() < deadline:
            text = subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"],
                                  capture_output=True, text=True, check=False).stdout
            if all(want in text for want in wants):
                return text
            time.sleep(0.2)
        raise AssertionError(f"{wants!r} never shown:\n{text}")

    try:
        while not _processes_with("sleep 3174 "):
            time.sleep(0.1)
        subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "100", "-y", "30",
                        command], check=True)
        screen(f"+ {_f58(jobid):>13}", "fluxes top: fx\n", "] 1/4 used", "q quit")
        subprocess.run([*tmux, "send-keys", "-t", "top", "Enter"], check=True)
        # the child's job, seen from inside; its scheduler's status follows within moments
        screen(f"fluxes top: {parent.keys.ns}.{jobid} (depth 1", " jobs 1 running",
               "nodes [" + "#" * 30 + "] 1/1 used", "s inner", "q quit")
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        screen("fluxes top: fx\n")
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and subprocess.run(
                [*tmux, "has-session", "-t", "top"], capture_output=True,
                check=False).returncode == 0:
            time.sleep(0.1)
        assert subprocess.run([*tmux, "has-session", "-t", "top"], capture_output=True,
                              check=False).returncode != 0, "q did not end fluxes top"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, check=False)
        main(["--uri", uri, "cancel", str(jobid)])
    wait_ended(parent, jobid)


def test_a_drill_kills_a_childs_scheduler_and_the_child_recovers(
        launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    parent = parent_of(launcher)
    jobid = batch(uri, capsys, "-N1", f"--output={tmp_path}/drill.out", "--wrap",
                  "sleep", "3176")
    try:
        deadline = time.monotonic() + 60
        while not parent.redis.hexists(parent.keys.children, str(jobid)):
            assert time.monotonic() < deadline, "the child instance never came up"
            time.sleep(0.1)
        child = child_of(parent, jobid)
        # the leader task supervises the child's workers as fluxes start does
        assert main(["drill", "--uri", str(child.uri), "--kill", "scheduler", "--rounds",
                     "1", "--jobs", "20"]) == 0
        assert "all invariants hold" in capsys.readouterr().out
    finally:
        main(["--uri", uri, "cancel", str(jobid)])
    wait_ended(parent, jobid)


def test_purging_a_batch_job_removes_its_child_and_grandchild_keys(
        launcher: Launcher, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = str(launcher.uri)
    parent = parent_of(launcher)
    inner = tmp_path / "inner.sh"
    inner.write_text("#!/bin/sh\nfluxes run -n1 true\n")
    outer = tmp_path / "outer.sh"
    outer.write_text("#!/bin/sh\n#FLUX: -N1\n"
                     f"id=$(fluxes batch -N1 --output={tmp_path}/inner.out {inner}) || exit 90\n"
                     "fluxes job wait $id || exit 91\n")
    jobid = batch(uri, capsys, f"--output={tmp_path}/outer.out", str(outer))
    events = wait_ended(parent, jobid)
    finish = next(c for n, c in events if n == "finish")
    assert finish["status"] == 0, (events, (tmp_path / "outer.out").read_text())
    child = child_of(parent, jobid)
    grandchildren = child.redis.hvals(child.keys.children)
    assert len(grandchildren) == 1

    def child_keys() -> list[bytes]:
        prefix = f"{{{child.keys.ns}".encode()
        return [k for k in parent.redis.scan_iter(count=1000)
                if k.startswith(prefix) and k[len(prefix):len(prefix) + 1] in b"}:."]

    found = child_keys()
    assert any(k.startswith(b"{%s}" % grandchildren[0]) for k in found)
    assert main(["--uri", uri, "job", "purge", "--force", str(jobid)]) == 0
    assert child_keys() == []
    assert not parent.redis.hexists(parent.keys.children, str(jobid))
    assert parent.redis.scard(parent.keys.children_purged) == 0
