"""``fluxes bulksubmit``'s inputs and substitutions (no instance)."""

from __future__ import annotations

import io

import pytest

from fluxes.cli.cmd_bulksubmit import combinations, split_inputs, substitute
from fluxes.cli.main import main
from fluxes.cli.util import UsageError


def no_files(path: str) -> list[str]:
    raise AssertionError(f"read {path}")


def test_inputs_from_lists_files_and_stdin() -> None:
    assert split_inputs(["echo", "{}", ":::", "1", "2"], None, no_files) == \
        (["echo", "{}"], [["1", "2"]], [False])
    files = {"f": ["a", "b"]}
    assert split_inputs(["x", "::::", "f", ":::+", "1"], None, files.__getitem__) == \
        (["x"], [["a", "b"], ["1"]], [False, True])
    assert split_inputs(["echo"], io.StringIO("1\n\n2\n"), no_files) == \
        (["echo"], [["1", "2"]], [False])


@pytest.mark.parametrize(("words", "error"), [
    (["echo", ":::+", "1"], "links to a list before it"),
    (["echo", ":::", "1", ":::"], "an input list is empty"),
    (["echo"], "no inputs"),
])
def test_bad_inputs(words: list[str], error: str) -> None:
    with pytest.raises(UsageError, match=error):
        split_inputs(words, None, no_files)


def test_combinations_and_links() -> None:
    assert list(combinations([["1", "2"], ["3", "4"]], [False, False])) == \
        [["1", "3"], ["1", "4"], ["2", "3"], ["2", "4"]]
    assert list(combinations([["1", "2"], ["3", "4"]], [False, True])) == \
        [["1", "3"], ["2", "4"]]
    # a shorter linked list is cycled
    assert list(combinations([["1", "2", "3"], ["x"], ["a", "b"]], [False, True, False])) == \
        [["1", "x", "a"], ["1", "x", "b"], ["2", "x", "a"], ["2", "x", "b"],
         ["3", "x", "a"], ["3", "x", "b"]]


@pytest.mark.parametrize(("template", "inputs", "out"), [
    ("{}", ["a"], "a"), ("{1}-{0}", ["a", "b"], "b-a"), ("{seq}/{seq1}", ["a"], "4/5"),
    ("{.%}", ["dir/f.txt"], "dir/f"), ("{./}", ["dir/f.txt"], "f.txt"),
    ("{./%}", ["dir/f.txt"], "f"), ("{.//}", ["dir/f.txt"], "dir"),
    ("{1./%}", ["x", "d/g.c"], "g"), ("out-{{id}}-{}", ["a"], "out-{{id}}-a"),
    ("{{id.f58}}", ["a"], "{{id.f58}}"), ("{{}}", ["a"], "{}"),
])
def test_substitutions(template: str, inputs: list[str], out: str) -> None:
    assert substitute(template, inputs, 4) == out


@pytest.mark.parametrize(("template", "error"), [
    ("{1}", "beyond the 1 given"), ("{nope}", "unknown name"), ("{.x}", "no attribute"),
    ("{}{0}", "numbering"), ("{", "Single"),
])
def test_bad_templates(template: str, error: str) -> None:
    with pytest.raises(UsageError, match=error):
        substitute(template, ["a"], 0)


def test_dry_run_shows_each_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bulksubmit", "--dry-run", "-n", "{}", "echo", "{seq}", ":::", "1", "2"]) == 0
    assert capsys.readouterr().out == ("bulksubmit: submit --ntasks=1 echo 0\n"
                                       "bulksubmit: submit --ntasks=2 echo 1\n")
    assert main(["bulksubmit", "--dry-run", "-n", "x{}", "echo", ":::", "1"]) == 2
    assert "--ntasks 'x1'" in capsys.readouterr().err
    assert main(["bulksubmit", "--define", "p=1", "echo", ":::", "1"]) == 2
    assert "--define is not supported" in capsys.readouterr().err
