"""The documented examples, run: every ``console`` block of README.md and docs/ marked
``<!-- doc-test -->`` on the line before it runs, command by command, in one instance
(2 nodes x 4 cores, the default configuration), and its output must be what the
block shows, so that a doc cannot drift from the code again.

In a block, ``$ COMMAND`` lines run through ``sh -c`` (stdout and stderr together)
and the lines up to the next ``$`` are their expected output. Before comparing, job
ids become ``ƒID`` on both sides; a line ``...`` in the block stands for any number of
lines. ``<!-- doc-test unordered -->`` compares each command's lines in any order
(tasks of a parallel job print in the order they run).
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


def examples() -> list[Example]:
    """Every marked console block of README.md and docs/ (recursively)."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines[:-1]):
            mark = MARK.match(line.strip())
            if mark is None or not lines[i + 1].startswith("```console"):
                continue
            steps: list[Step] = []
            for body in lines[i + 2:]:
                if body.startswith("```"):
                    break
                if body.startswith("$ "):
                    steps.append(Step(body[2:], []))
                elif steps:
                    steps[-1].expected.append(body)
            found.append(Example(f"{path.relative_to(ROOT)}:{i + 2}",
                                 "unordered" in mark["opts"], steps))
    return found


def normal(lines: list[str]) -> list[str]:
    """Lines as compared: job ids masked, trailing blanks dropped."""
    out = [JOBID.sub("ƒID", line).rstrip() for line in lines]
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
    return bool(actual) and actual[0] == head and matches(rest, actual[1:])


@pytest.fixture(scope="module")
def instance_env() -> Iterator[dict[str, str]]:
    need_redis()
    with tempfile.TemporaryDirectory(prefix="fluxes-docs-") as tmp:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ENV_CREDENTIALS, "")
            launcher = Launcher(state_dir=Path(tmp) / "state", nodes=2, cores_per_node=4)
            launcher.start()
        try:
            work = Path(tmp) / "work"
            work.mkdir()
            # examples name the repository's own files (tests/cases/...) by relative path
            (work / "tests").symlink_to(ROOT / "tests")
            bindir = os.path.dirname(sys.executable)
            yield dict(os.environ, FLUXES_URI=str(launcher.uri), FLUXES_CREDENTIALS="",
                       PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                       DOCS_WORK=str(work), COLUMNS="200")
        finally:
            launcher.stop()


@pytest.mark.parametrize("example", examples(), ids=lambda e: e.where)
def test_documented_example(example: Example, instance_env: dict[str, str]) -> None:
    for step in example.steps:
        done = subprocess.run(["sh", "-c", step.command], check=False, env=instance_env,
                              cwd=instance_env["DOCS_WORK"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=120)
        actual = normal(done.stdout.decode("utf-8", "replace").splitlines())
        expected = normal(step.expected)
        if example.unordered:
            actual, expected = sorted(actual), sorted(expected)
        assert matches(expected, actual), (
            f"{example.where}: $ {step.command}\nexpected:\n" + "\n".join(expected)
            + "\nactual:\n" + "\n".join(actual))


def test_the_examples_are_found() -> None:
    # a marker that no longer finds its block would silently test nothing
    assert len(examples()) >= 6
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"])
    assert matches(["...", "x"], ["x"]) and not matches(["a"], ["a", "b"])
