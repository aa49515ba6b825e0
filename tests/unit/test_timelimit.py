"""Job time limits: flux's ``-t`` (bare minutes, RFC 23 with a unit) and Slurm's clock forms."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.formats.timelimit import parse_time_limit


@pytest.mark.parametrize(("text", "seconds"), [
    # a bare number is minutes (flux -t and Slurm agree)
    ("10", 600.0), ("0", 0.0), ("1.5", 90.0), (".5", 30.0), ("+2", 120.0), ("1e1", 600.0),
    # RFC 23 with a unit
    ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0), ("1d", 86400.0), ("250ms", 0.25),
    ("1.5h", 5400.0), ("inf", math.inf),
    # Slurm
    ("10:00", 600.0), ("1:30", 90.0), ("01:00:00", 3600.0), ("1:02:03", 3723.0),
    ("2-0", 172800.0), ("1-12", 129600.0), ("1-2:30", 95400.0), ("1-02:03:04", 93784.0),
    ("90:00", 5400.0), ("0:0", 0.0),
])
def test_forms(text: str, seconds: float) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize(("text", "message"), [
    ("-5", "time limit '-5' is negative"),
    ("-5m", "time limit '-5m' is negative"),
    ("-1:00", "time limit '-1:00' is negative"),
    ("-inf", "time limit '-inf' is negative"),
    ("", "time limit is empty"),
    (" 10", "invalid time limit ' 10': leading or trailing whitespace"),
    ("1e400", "time limit '1e400' is too large"),
    ("1e400s", "time limit '1e400s' is too large"),
])
def test_refusals_quote_the_text_as_typed(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_time_limit(text)
    assert str(info.value) == message


@pytest.mark.parametrize("text", ["5x", "1:", ":30", "1::2", "1:2:3:4", "1-", "-", "1-2-3",
                                  "1-2:3:4:5", "a:b", "1:30s", "1d2h", "10 m", "nan",
                                  "1" * 70 + ":00", "٣:00"])
def test_unknown_forms_name_the_accepted_ones(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_time_limit(text)
    message = str(info.value)
    assert message.count("\n") == 0
    assert repr(text[:30])[:-1] in message  # the text as typed (its head), never seconds
    assert "H:M:S" in message or "too long" in message


def test_a_negative_limit_never_reports_seconds() -> None:
    with pytest.raises(ValueError) as info:
        parse_time_limit("-5")
    assert "300" not in str(info.value)


@given(st.integers(0, 10**6), st.integers(0, 59), st.integers(0, 59))
def test_slurm_clock_is_hours_minutes_seconds(h: int, m: int, s: int) -> None:
    assert parse_time_limit(f"{h}:{m:02d}:{s:02d}") == h * 3600 + m * 60 + s
    assert parse_time_limit(f"{m}:{s:02d}") == m * 60 + s


@given(st.integers(0, 10**5), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_slurm_day_forms(d: int, h: int, m: int, s: int) -> None:
    day = d * 86400
    assert parse_time_limit(f"{d}-{h}") == day + h * 3600
    assert parse_time_limit(f"{d}-{h}:{m}") == day + h * 3600 + m * 60
    assert parse_time_limit(f"{d}-{h}:{m}:{s}") == day + h * 3600 + m * 60 + s


@given(st.floats(0, 1e9, allow_nan=False))
def test_bare_numbers_are_minutes(minutes: float) -> None:
    assert parse_time_limit(repr(minutes)) == pytest.approx(minutes * 60.0)


@given(st.text(max_size=20))
def test_any_text_is_a_number_or_one_line_value_error(text: str) -> None:
    try:
        seconds = parse_time_limit(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert seconds >= 0
