"""The retention policy, pure: which jobs a purge takes, how far a stream may be trimmed,
archive days, lost-write detection, and the ``[job-manager]`` configuration."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.config import InstanceConfig
from fluxes.domain.retention import (
    GroupPosition,
    Limits,
    Loss,
    Mark,
    acknowledged_through,
    count_purge,
    id_after,
    id_before,
    losses,
    merge_oldest,
    parse_id,
    select_purge,
    split_by_day,
    trim_bound,
)
from fluxes.errors import ConfigError

NOW = 1_800_000_000.0
DAY = 86_400.0

# (jobid, t_inactive), oldest first
INACTIVE = [(10, NOW - 5 * DAY), (11, NOW - 3 * DAY), (12, NOW - 2 * DAY), (13, NOW - 60.0),
            (14, NOW - 1.0)]


def test_no_limit_purges_nothing() -> None:
    assert select_purge(INACTIVE, len(INACTIVE), NOW, Limits()) == []
    assert count_purge(5, 5, Limits()) == 0


def test_age_limit_takes_the_jobs_inactive_for_longer() -> None:
    assert select_purge(INACTIVE, 5, NOW, Limits(age=2.5 * DAY)) == [10, 11]
    assert select_purge(INACTIVE, 5, NOW, Limits(age=0)) == [10, 11, 12, 13, 14]


def test_num_limit_takes_the_oldest_beyond_it() -> None:
    assert select_purge(INACTIVE, 5, NOW, Limits(num=2)) == [10, 11, 12]
    assert select_purge(INACTIVE, 5, NOW, Limits(num=5)) == []
    assert select_purge(INACTIVE, 5, NOW, Limits(num=0)) == [10, 11, 12, 13, 14]
    # the list read is the oldest of more jobs: the number counts them all
    assert select_purge(INACTIVE[:2], 1000, NOW, Limits(num=10)) == [10, 11]


def test_both_limits_take_either() -> None:
    assert select_purge(INACTIVE, 5, NOW, Limits(age=4 * DAY, num=3)) == [10, 11]
    assert select_purge(INACTIVE, 5, NOW, Limits(age=DAY, num=4)) == [10, 11, 12]


@given(st.lists(st.floats(min_value=0, max_value=NOW), max_size=30),
       st.one_of(st.none(), st.floats(min_value=0, max_value=NOW)),
       st.one_of(st.none(), st.integers(min_value=0, max_value=40)))
def test_what_is_selected_is_what_is_counted(times: list[float], age: float | None,
                                             num: int | None) -> None:
    oldest = sorted(enumerate(times), key=lambda x: (x[1], x[0]))
    limits = Limits(age, num)
    chosen = select_purge(oldest, len(oldest), NOW, limits)
    older = sum(1 for _j, t in oldest if age is not None and t < NOW - age)
    assert len(chosen) == count_purge(len(oldest), older, limits)
    # always a prefix of the oldest: nothing newer goes while something older stays
    assert chosen == [j for j, _t in oldest[:len(chosen)]]


def test_limits_refuse_negative_values() -> None:
    with pytest.raises(ValueError, match="age limit"):
        Limits(age=-1)
    with pytest.raises(ValueError, match="num limit"):
        Limits(num=-1)


def test_merge_oldest_across_partitions() -> None:
    a = [(2, 5.0), (4, 9.0)]
    b = [(1, 5.0), (3, 7.0)]
    assert merge_oldest([a, b], 3) == [(1, 5.0), (2, 5.0), (3, 7.0)]


def test_stream_ids() -> None:
    assert parse_id("5-3") == (5, 3) and parse_id("7") == (7, 0)
    assert id_after("5-3") == "5-4" and id_after(f"5-{2**64 - 1}") == "6-0"
    assert id_before("5-3") == "5-2" and id_before("5-0") == f"4-{2**64 - 1}"
    assert id_before("0-0") == "0-0"
    with pytest.raises(ValueError):
        parse_id("x-1")


def test_trim_stops_at_every_groups_unacknowledged_entries() -> None:
    assert acknowledged_through([]) is None  # nobody reads it: nothing is acknowledged
    done = GroupPosition("a", "10-5")
    assert acknowledged_through([done]) == "10-5"
    pending = GroupPosition("b", "12-0", oldest_pending="9-2")
    assert acknowledged_through([done, pending]) == "9-1"
    behind = GroupPosition("c", "3-0")
    assert acknowledged_through([done, pending, behind]) == "3-0"
    assert acknowledged_through([GroupPosition("d", "0-0")]) is None
    assert acknowledged_through([GroupPosition("e", "4-0", oldest_pending="0-0")]) is None


def test_trim_bound_is_the_lowest_and_needs_every_reader() -> None:
    assert trim_bound("5-0", "3-2", "9-0") == "3-2"
    assert trim_bound("5-0", None) is None
    assert trim_bound("0-0") is None


def test_archive_days_split_runs_of_ids() -> None:
    day1 = 1_700_000_000 * 1000  # 2023-11-14 22:13:20 UTC
    ids = [f"{day1}-0", f"{day1 + 1}-0", f"{day1 + 6 * 3600 * 1000}-0",
           f"{day1 + 6 * 3600 * 1000}-1"]
    assert split_by_day(ids) == [("2023-11-14", 0, 2), ("2023-11-15", 2, 4)]
    assert split_by_day([]) == []


def test_losses_when_history_went_backwards() -> None:
    mark = Mark("inst", "100-5", fluid_gen=4)
    assert losses(mark, "inst", "100-5", 4) == []
    assert losses(mark, "inst", "200-0", 9) == []
    assert losses(mark, "inst", "100-4", 4) == [Loss("journal", "100-5", "100-4")]
    assert losses(mark, "inst", "0-0", 3) == [
        Loss("journal", "100-5", "0-0"), Loss("FLUID generator counter", "4", "3")]
    # another instance (recreated on purpose) is not a loss
    assert losses(mark, "other", "0-0", 0) == []
    assert "went backwards from 100-5 to 0-0" in Loss("journal", "100-5", "0-0").text()


def test_job_manager_table() -> None:
    config = InstanceConfig.from_toml(
        '[job-manager]\ninactive-age-limit = "7d"\ninactive-num-limit = 1000\n'
        'journal-archive = "/var/lib/fluxes/archive"\n')
    assert config.retention.inactive_age_limit == 7 * DAY
    assert config.retention.inactive_num_limit == 1000
    assert config.retention.journal_archive == "/var/lib/fluxes/archive"
    default = InstanceConfig.from_toml("")
    assert default.retention.inactive_age_limit is None
    assert default.retention.journal_archive is None


@pytest.mark.parametrize(("text", "message"), [
    ('[job-manager]\ninactive-age-limit = "soon"\n', "job-manager.inactive-age-limit"),
    ("[job-manager]\ninactive-num-limit = -1\n", "job-manager.inactive-num-limit"),
    ("[job-manager]\ninactive-num-limit = true\n", "job-manager.inactive-num-limit"),
    ("[job-manager]\njournal-archive = 3\n", "job-manager.journal-archive"),
    ("[job-manager]\njournal-size-limit = 3\n", "job-manager.journal-size-limit: unknown"),
    ('job-manager = "x"\n', "job-manager: expected a table"),
])
def test_bad_job_manager_table(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        InstanceConfig.from_toml(text)
