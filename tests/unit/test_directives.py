"""RFC 36 ``#FLUX:`` directives and the ``#SBATCH`` subset (fluxes.formats.directives)."""

from __future__ import annotations

import pytest

from fluxes.formats.directives import flux_directives, sbatch_directives, script_directives


def test_shell_directives_with_comments_and_quotes() -> None:
    script = ("#!/bin/sh\n#FLUX: -N4                  # Request four nodes\n"
              "#FLUX: --queue=batch\n#FLUX: --job-name='my job' -c2\nflux run app\n")
    assert flux_directives(script) == ["-N4", "--queue=batch", "--job-name=my job", "-c2"]


def test_comment_lines_with_the_same_prefix_do_not_stop_processing() -> None:
    script = "#!/bin/sh\n# Set flux directives\n#FLUX: -N1\n# Set job name:\n" \
             "#FLUX: --job-name=test\nhostname; date\n"
    assert flux_directives(script) == ["-N1", "--job-name=test"]


def test_lowercase_tag_and_another_prefix() -> None:
    script = "#!/usr/bin/lua\n--\n-- flux: -N1 --exclusive\n-- flux: --output=job.out\nx = 1\n"
    assert flux_directives(script) == ["-N1", "--exclusive", "--output=job.out"]


def test_a_directive_after_processing_stopped_is_an_error() -> None:
    script = "#!/bin/sh\n#FLUX: -N1\nhostname; date\n#FLUX: --job-name=test\n"
    with pytest.raises(ValueError, match="line 4: directive after directives ended at line 3"):
        flux_directives(script)


def test_mixed_sentinels_are_an_error() -> None:
    with pytest.raises(ValueError, match="line 3: sentinel"):
        flux_directives("#!/bin/sh\n#FLUX: -N1\n# flux: -n2\n")


def test_triple_quotes_on_one_line() -> None:
    script = ("#!/bin/sh\n# flux: --setattr=user.foo=\"\"\"{\"key\": 42}\"\"\"\n"
              "# flux: --setattr=user.bar='''It's a \"job\"'''\n")
    assert flux_directives(script) == ['--setattr=user.foo={"key": 42}',
                                       "--setattr=user.bar=It's a \"job\""]


def test_multiline_triple_quotes_strip_common_indentation() -> None:
    script = ('#!/bin/sh\n# flux: --setattr=user.conf="""\n# flux: [config]\n'
              '# flux:   item = "foo"\n# flux: """\n# flux: -N2\necho\n')
    assert flux_directives(script) == ['--setattr=user.conf=[config]\n  item = "foo"\n', "-N2"]


def test_unterminated_quotes_name_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        flux_directives("#!/bin/sh\n#FLUX: --job-name='oops\n")
    with pytest.raises(ValueError, match='line 2: unterminated """'):
        flux_directives('#!/bin/sh\n#FLUX: --setattr=user.x="""\n#FLUX: a\n')


def test_python_docstring_directives() -> None:
    script = ('#!/usr/bin/env python3\n"""\nflux: --nodes=4\n\n'
              'Set an arbitrary value in jobspec:\nflux: --setattr=user.foo="hello, earth"\n"""\n')
    assert flux_directives(script) == ["--nodes=4", "--setattr=user.foo=hello, earth"]


def test_no_directives() -> None:
    assert flux_directives("#!/bin/sh\necho hi\n") == []
    assert sbatch_directives("#!/bin/sh\necho hi\n") == []


def test_sbatch_common_subset() -> None:
    script = ("#!/bin/bash\n#SBATCH -N 2 -t 10:00 -J name\n#SBATCH --ntasks=8 -c2\n"
              "#SBATCH --output=slurm-%j.out -p debug  # a comment\nsrun hostname\n"
              "#SBATCH -N 5\n")
    assert sbatch_directives(script) == ["--nodes=2", "--time-limit=10:00", "--job-name=name",
                                         "--ntasks=8", "--cores-per-task=2",
                                         "--output=slurm-{{id}}.out", "--queue=debug"]


@pytest.mark.parametrize(("line", "message"), [
    ("#SBATCH --mem=4G", "#SBATCH --mem is not supported"),
    ("#SBATCH -A acct", "#SBATCH -A is not supported"),
    ("#SBATCH -N 2-4", "ranges such as 2-4 are not supported"),
    ("#SBATCH -o out.%A", "pattern '%A' is not supported"),
    ("#SBATCH -J", "#SBATCH -J needs a value"),
])
def test_sbatch_unsupported_options_are_one_line_errors(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        sbatch_directives(f"#!/bin/sh\n{line}\n")
    assert "\n" not in str(info.value) and "line 2" in str(info.value)


def test_flux_directives_come_after_sbatch_ones_so_they_win() -> None:
    script = "#!/bin/sh\n#SBATCH -N 3\n#FLUX: -N2\n"
    assert script_directives(script) == ["--nodes=3", "-N2"]
