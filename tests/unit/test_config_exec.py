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
    ("[exec]\nverbose = true\n", "exec.verbose: unknown key (known: kill-timeout, output-limit)"),
])
def test_bad_values_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        InstanceConfig.from_toml(text)
