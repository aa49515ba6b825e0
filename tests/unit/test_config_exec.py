"""The [exec] table of the instance configuration."""

from __future__ import annotations

import pytest

from fluxes.config import DEFAULT_OUTPUT_LIMIT, InstanceConfig
from fluxes.errors import ConfigError


def test_defaults() -> None:
    config = InstanceConfig.from_toml("")
    assert config.kill_timeout == 5.0
    assert config.output_limit == DEFAULT_OUTPUT_LIMIT == 100 << 20


def test_kill_timeout_and_output_limit() -> None:
    config = InstanceConfig.from_toml('[exec]\nkill-timeout = "2m"\noutput-limit = "1G"\n')
    assert config.kill_timeout == 120.0
    assert config.output_limit == 1 << 30
    assert InstanceConfig.from_toml("[exec]\noutput-limit = 0\n").output_limit == 0


@pytest.mark.parametrize(("text", "message"), [
    ('[exec]\noutput-limit = "lots"\n', "exec.output-limit: invalid size 'lots'"),
    ("[exec]\noutput-limit = -1\n", "exec.output-limit: size -1 is negative"),
    ('[exec]\nkill-timeout = "soon"\n', "exec.kill-timeout:"),
    ("[exec]\nverbose = true\n", "exec.verbose: unknown key (known: kill-timeout, output-limit"),
    ("[exec]\nprolog = 3\n", "exec.prolog: expected a command string or a list of strings"),
    ('[exec]\nprolog = " "\n', "exec.prolog: empty command"),
    ('[exec]\nepilog = "x"\nepilog-timeout = "soon"\n', "exec.epilog-timeout:"),
])
def test_bad_values_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        InstanceConfig.from_toml(text)


def test_perilog_commands_and_timeouts() -> None:
    config = InstanceConfig.from_toml(
        '[exec]\nprolog = "/site/prolog"\nepilog = ["/site/epilog", "-v"]\n'
        'epilog-timeout = "1m"\nhousekeeping = "hk"\n').perilog
    assert config.prolog is not None and config.prolog.argv == ("/bin/sh", "-c", "/site/prolog")
    assert config.prolog.timeout == 1800.0  # flux's default
    assert config.epilog is not None and config.epilog.argv == ("/site/epilog", "-v")
    assert config.epilog.timeout == 60.0
    assert config.housekeeping is not None and config.housekeeping.timeout == 0.0
    assert config.after_job
    assert not InstanceConfig.from_toml("").perilog
