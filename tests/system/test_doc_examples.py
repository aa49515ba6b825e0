"""The documented examples, run: every ``console`` block of README.md and docs/ marked
``<!-- doc-test -->`` on the line before it runs, command by command, in one instance
(2 nodes x 4 cores, the default configuration), and its output must be what the
block shows, so that a doc cannot drift from the code again.

In a block, ``$ COMMAND`` lines run through ``sh -c`` (stdout and stderr together)
and the lines up to the next ``$`` are their expected output. Before comparing, job
ids become ``ƒID`` on both sides; a line ``...`` in the block stands for any number of
lines, and ``...`` inside a line any text. Times are masked too: UNIX times
(``1795322977.593200``), the working directory (``/tmp/fxdocwd`` in the docs),
``job eventlog -H``'s date and offsets, and where a job
ran (R's ranks and nodes, the scheduler's resource summary).
``<!-- doc-test unordered -->`` compares each command's lines in any order
(tasks of a parallel job print in the order they run).

``<!-- doc-test config=NAME -->`` before a ``toml`` block names that configuration,
and ``<!-- doc-test instance=NAME -->`` runs a console block in a second instance
started with it (the queue examples need their ``site.toml``'s queues).

A job id a block shows in a command's output stands, in later commands (of that
block and the blocks after it), for the id the instance printed at the same place:
``$ fluxes submit true`` shows ``ƒ3KhR7ug81R9`` and ``$ fluxes job wait ƒ3KhR7ug81R9``
then waits for the job just submitted, so the examples read as a user types them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluxes.proc.launcher import Launcher
from fluxes.store.security import ENV_CREDENTIALS
from tests.system.conftest import need_redis

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"<!--\s*doc-test(?P<opts>[^>]*)-->\s*$")
JOBID = re.compile(r"ƒ[1-9A-HJ-NP-Za-km-z]{4,}")
MASKS = [(JOBID, "ƒID"), (re.compile(r"\b1[6-9]\d{8}\.\d+"), "TIME"),
         (re.compile(r"^\[[A-Z][a-z]{2}\d\d \d\d:\d\d\]"), "[DATE]"),
         (re.compile(r"^\[ *\+\d+\.\d+\]"), "[+OFFSET]"),
         (re.compile(r"\b\d\.\d{3}s\b"), "T.TTTs"),  # a young job's age in `jobs`
         # where a job runs: which ranks and cores were free
         (re.compile(r'"resource_summary":"[^"]*"'), '"resource_summary":"R"'),
         (re.compile(r'"R_lite":\[.*?\],"nodelist":\[[^]]*\]'), '"R_lite":R')]
OPTION = re.compile(r"(instance|config)=(\S+)")


@dataclass
class Step:
    """One ``$ COMMAND`` of a block and the output the block shows for it."""

    command: str
    expected: list[str]


@dataclass
class Example:
    """A marked block: where it is and its steps."""

    where: str
    unordered: bool
    steps: list[Step]
    instance: str = ""


def configs() -> dict[str, str]:
    """The ``toml`` blocks marked ``<!-- doc-test config=NAME -->``, by NAME."""
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"<!--\s*doc-test config=(\S+)\s*-->\n```toml\n(.*?)```", text,
                             re.S):
            found[m[1]] = m[2]
    return found


def examples() -> list[Example]:
    """Every marked console block of README.md and docs/ (recursively)."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[:-1]):
            mark = MARK.match(line.strip())
            if mark is None or not lines[i + 1].startswith("```console"):
                continue
            options = dict(OPTION.findall(mark["opts"]))
            steps: list[Step] = []
            for body in lines[i + 2:]:
                if body.startswith("```"):
                    break
                if body.startswith("$ "):
                    steps.append(Step(body[2:], []))
                elif steps:
                    steps[-1].expected.append(body)
            found.append(Example(f"{path.relative_to(ROOT)}:{i + 2}",
                                 "unordered" in mark["opts"], steps,
                                 options.get("instance", "")))
    return found


def bind_ids(expected: list[str], actual: list[str], ids: dict[str, str]) -> None:
    """Learn which real id each id the doc shows stands for: the lines before the
    first ``...`` pair up in order, and so do the ids within each pair."""
    for doc, real in zip(expected, actual, strict=False):
        if doc.strip() == "...":
            break
        for doc_id, real_id in zip(JOBID.findall(doc), JOBID.findall(real), strict=False):
            ids[doc_id] = real_id


def with_ids(command: str, ids: dict[str, str]) -> str:
    """The command with each id the doc showed earlier replaced by the real one."""
    return JOBID.sub(lambda m: ids.get(m[0], m[0]), command)


def normal(lines: list[str]) -> list[str]:
    """Lines as compared: job ids masked, trailing blanks dropped."""
    out = []
    for line in lines:
        masked = line
        for pattern, mask in MASKS:
            masked = pattern.sub(mask, masked)
        out.append(masked.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is ``expected``, a ``...`` line standing for any lines."""
    if not expected:
        return not actual
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and same_line(head, actual[0]) and matches(rest, actual[1:])


def same_line(expected: str, actual: str) -> bool:
    """Whether a line is the one shown, ``...`` inside it standing for any text."""
    if expected == actual:
        return True
    if "..." not in expected:
        return False
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


@pytest.fixture(scope="module")
def doc_ids() -> dict[str, str]:
    """The ids the blocks showed so far and the instance's ids they stand for."""
    return {}


class Instances:
    """The instances the blocks run in, each started when a block first needs it:
    ``""`` the default (2 nodes x 4 cores), else one per named configuration."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.envs: dict[str, dict[str, str]] = {}
        self.launchers: list[Launcher] = []

    def env(self, name: str) -> dict[str, str]:
        """The environment of the commands of a block run in instance ``name``."""
        if name not in self.envs:
            self.envs[name] = self._start(name)
        return self.envs[name]

    def _start(self, name: str) -> dict[str, str]:
        where = self.tmp / (name or "default")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, "")
            launcher = Launcher(state_dir=where / "state", nodes=2, cores_per_node=4,
                                config_text=configs()[name] if name else "")
            self.launchers.append(launcher)
            launcher.start()
        work = where / "work"
        work.mkdir()
        # examples name the repository's own files (tests/cases/...) by relative path
        (work / "tests").symlink_to(ROOT / "tests")
        bindir = os.path.dirname(sys.executable)
        return dict(os.environ, FLUXES_URI=str(launcher.uri), FLUXES_CREDENTIALS="",
                    PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                    DOCS_WORK=str(work), COLUMNS="200")


@pytest.fixture(scope="module")
def instances() -> Iterator[Instances]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-docs-") as tmp:
        pool = Instances(Path(tmp))
        try:
            yield pool
        finally:
            for launcher in pool.launchers:
                launcher.stop()


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.where)
def test_documented_example(example: Example, instances: Instances,
                            doc_ids: dict[str, str]) -> None:
    env = instances.env(example.instance)
    for step in example.steps:
        done = subprocess.run(["sh", "-c", with_ids(step.command, doc_ids)], check=False,
                              env=env, cwd=env["DOCS_WORK"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=120)
        # the examples' working directory is /tmp/fxdocwd
        printed = done.stdout.decode("utf-8", "replace").replace(
            env["DOCS_WORK"], "/tmp/fxdocwd").splitlines()
        bind_ids(step.expected, printed, doc_ids)
        actual = normal(printed)
        expected = normal(step.expected)
        if example.unordered:
            actual, expected = sorted(actual), sorted(expected)
        assert matches(expected, actual), (
            f"{example.where}: $ {step.command}\nexpected:\n" + "\n".join(expected)
            + "\nactual:\n" + "\n".join(actual))


def test_the_examples_are_found() -> None:
    # a marker that no longer finds its block would silently test nothing
    assert len(examples()) >= 30
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["...", "x"], ["x"]) and not matches(["a"], ["a", "b"])
    assert matches(['{"a":1,...}'], ['{"a":1,"b":2}']) and not matches(["a..."], ["ba"])
    assert normal(["1795322977.593200 submit", "[  +0.000968] depend"]) == [
        "TIME submit", "[+OFFSET] depend"]
    assert all(e.instance in configs() for e in examples() if e.instance)
    ids: dict[str, str] = {}
    bind_ids(["ƒ3KhR7ug81R9 ƒ3KhR87QcKmR", "...", "ƒ3KhTrMb87my"],
             ["ƒ2abcd ƒ2bcde", "x", "ƒ2cdef"], ids)
    assert ids == {"ƒ3KhR7ug81R9": "ƒ2abcd", "ƒ3KhR87QcKmR": "ƒ2bcde"}
    assert with_ids("fluxes job wait ƒ3KhR87QcKmR ƒ3Kh9999", ids) == (
        "fluxes job wait ƒ2bcde ƒ3Kh9999")
