"""The [sched] table of the instance configuration: staged starts' keys."""

from __future__ import annotations

import pytest

from fluxes.config import InstanceConfig, stage_settings
from fluxes.errors import ConfigError


def test_staging_defaults() -> None:
    config = InstanceConfig.from_toml("")
    assert stage_settings(config.sched) == (3, 0.02)


def test_staging_set() -> None:
    config = InstanceConfig.from_toml('[sched]\nstage-depth = 0\nstage-horizon = "1s"\n')
    assert stage_settings(config.sched) == (0, 1.0)
    config = InstanceConfig.from_toml("[sched]\nstage-depth = 5\nstage-horizon = 0.5\n")
    assert stage_settings(config.sched) == (5, 0.5)


@pytest.mark.parametrize(("text", "message"), [
    ("[sched]\nstage-depth = -1\n", "sched.stage-depth: expected an integer >= 0, got -1"),
    ("[sched]\nstage-depth = true\n", "sched.stage-depth: expected an integer >= 0"),
    ('[sched]\nstage-depth = "2"\n', "sched.stage-depth: expected an integer >= 0"),
    ("[sched]\nstage-depth = 1.5\n", "sched.stage-depth: expected an integer >= 0"),
    ('[sched]\nstage-horizon = "soon"\n', "sched.stage-horizon:"),
    ('[sched]\nstage-horizon = "inf"\n', "sched.stage-horizon: must be finite"),
    ("[sched]\nstage-horizon = -1\n", "sched.stage-horizon:"),
    ("[sched]\nstage-horizon = [1]\n", "sched.stage-horizon: expected a duration"),
    ("[sched]\nstage-width = 1\n", "sched.stage-width: unknown key"),
])
def test_bad_staging_values_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        InstanceConfig.from_toml(text)
    assert "\n" not in str(info.value)
