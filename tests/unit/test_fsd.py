"""Tests for fluxes.formats.fsd (RFC 23 Flux Standard Duration)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.formats.fsd import UNITS, format_duration, parse_duration

# format_duration keeps 6 significant digits, so the round trip may be off by
# half a unit in the 6th digit: a relative error of at most 5e-6.  The tiny
# slack covers the one rounding of the unit division/multiplication.
ROUND_TRIP_REL = 5e-6 * (1 + 1e-9)
# Below the normal float range relative precision is meaningless.
ROUND_TRIP_ABS = 1e-300


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("0", 0.0),
        ("0.5", 0.5),
        ("0.5s", 0.5),
        ("1.5m", 90.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("2ms", 0.002),
        ("3ms", 0.003),
        ("1500ms", 1.5),
        (".5m", 30.0),
        ("5.", 5.0),
        ("1e3", 1000.0),
        ("1E-3s", 0.001),
        ("2.5e1m", 1500.0),
        ("+5", 5.0),
        ("-0", 0.0),
        ("-0.0s", 0.0),
        ("0x10", 16.0),
        ("0x1p3s", 8.0),
        ("0x.8m", 30.0),
        ("1e-400", 0.0),
    ],
)
def test_parse_valid(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-15)


def test_parse_negative_zero_is_positive_zero() -> None:
    assert math.copysign(1.0, parse_duration("-0")) == 1.0
    assert math.copysign(1.0, parse_duration(-0.0)) == 1.0


@pytest.mark.parametrize("text", ["inf", "infinity", "INF", "Infinity", "INFINITY", "+inf"])
def test_parse_infinity(text: str) -> None:
    assert parse_duration(text) == math.inf


def test_hex_digits_win_over_day_unit() -> None:
    # strtod reads "0x1d" as one hex number, so flux-core sees 29 seconds.
    assert parse_duration("0x1d") == 29.0


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("-1", "negative"),
        ("-1m", "negative"),
        ("-inf", "negative"),
        ("-0x1", "negative"),
        ("nan", "not a number"),
        ("NaN", "not a number"),
        ("nan(123)", "not a number"),
        ("-nan", "not a number"),
        ("1x", "unknown unit"),
        ("1M", "unknown unit"),
        ("1S", "unknown unit"),
        ("1us", "unknown unit"),
        ("1sec", "unknown unit"),
        ("1ms5", "unknown unit"),
        ("1e", "unknown unit"),
        ("1.5.5", "unknown unit"),
        ("5m5s", "unknown unit"),
        ("1_000", "unknown unit"),
        ("0x", "unknown unit"),
        ("infs", "no unit"),
        ("infinityd", "no unit"),
        ("infinit", "no unit"),
        (" 1", "whitespace"),
        ("1 ", "whitespace"),
        ("1\n", "whitespace"),
        ("1 s", "unknown unit"),
        (".", "expected a number"),
        ("s", "expected a number"),
        ("m5", "expected a number"),
        ("--1", "expected a number"),
        ("\u0661", "expected a number"),  # ARABIC-INDIC DIGIT ONE: float() takes it
        ("1e999", "too large"),
        ("1e308d", "too large"),
        ("0x1p99999", "too large"),
    ],
)
def test_parse_invalid(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_duration(text)


def test_parse_message_is_one_line_and_short() -> None:
    with pytest.raises(ValueError) as info:
        parse_duration("1" + "x\n" * 1000)
    message = str(info.value)
    assert "\n" not in message
    assert len(message) < 200


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(0, 0.0), (30, 30.0), (1.5, 1.5), (math.inf, math.inf), (10**20, 1e20)],
)
def test_parse_numbers(value: float, seconds: float) -> None:
    result = parse_duration(value)
    assert isinstance(result, float)
    assert result == seconds


@pytest.mark.parametrize(
    "value",
    [
        -1,
        -0.5,
        -math.inf,
        math.nan,
        True,
        False,
        pytest.param(10**400, id="10**400"),
        pytest.param(10**5000, id="10**5000"),
    ],
)
def test_parse_bad_numbers(value: float) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize("value", [None, b"1s", [1], {"s": 1}, 1j])
def test_parse_bad_types(value: object) -> None:
    with pytest.raises(ValueError, match="duration must be"):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-0.0, "0s"),
        (0.001, "1ms"),
        (0.0123, "12.3ms"),
        (0.05, "50ms"),
        (0.1, "0.1s"),
        (1e-9, "1e-06ms"),
        (0.5, "0.5s"),
        (1, "1s"),
        (30, "30s"),
        (59.5, "59.5s"),
        (60, "1m"),
        (90, "1.5m"),
        (3599, "59.9833m"),
        (3600, "1h"),
        (5400, "1.5h"),
        (86400, "1d"),
        (86400 * 365, "365d"),
        (1e300, "1.15741e+295d"),
        # flux-core's fsd_format_duration vectors
        (math.inf, "infinity"),
        (0.001, "1ms"),
        (5.0, "5s"),
        (5.1, "5.1s"),
        (62.0, "1.03333m"),
        (4500.0, "1.25h"),
        (103680.0, "1.2d"),
    ],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_precision() -> None:
    assert format_duration(100, precision=2) == "1.7m"
    assert format_duration(100, precision=10) == "1.666666667m"
    assert format_duration(3599, precision=1) == "6e+01m"
    assert parse_duration(format_duration(3599, precision=1)) == 3600.0


@pytest.mark.parametrize("precision", [0, -1, 18, True, 1.5])
def test_format_bad_precision(precision: int) -> None:
    with pytest.raises(ValueError, match="precision"):
        format_duration(1.0, precision=precision)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        -1e-300,
        -math.inf,
        math.nan,
        True,
        "1s",
        None,
        pytest.param(10**400, id="10**400"),
        pytest.param(10**5000, id="10**5000"),
    ],
)
def test_format_invalid(value: float) -> None:
    with pytest.raises(ValueError):
        format_duration(value)


def test_units_table() -> None:
    assert UNITS == {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def test_infinity_round_trips() -> None:
    assert format_duration(math.inf) == "infinity"
    assert format_duration(float("inf"), precision=1) == "infinity"
    assert parse_duration(format_duration(math.inf)) == math.inf
    assert parse_duration("inf") == parse_duration("infinity") == math.inf


@given(st.floats(min_value=0.0, allow_nan=False, allow_infinity=True))
def test_round_trip(seconds: float) -> None:
    text = format_duration(seconds)
    back = parse_duration(text)
    if math.isinf(seconds):
        assert back == math.inf
    else:
        assert math.isclose(back, seconds, rel_tol=ROUND_TRIP_REL, abs_tol=ROUND_TRIP_ABS), text


@given(st.floats(min_value=0.0, max_value=1e300, allow_nan=False), st.integers(1, 17))
def test_round_trip_any_precision(seconds: float, precision: int) -> None:
    back = parse_duration(format_duration(seconds, precision=precision))
    rel = 5 * 10.0 ** (-precision) * (1 + 1e-9) + 1e-15
    assert math.isclose(back, seconds, rel_tol=rel, abs_tol=ROUND_TRIP_ABS)


@given(st.floats(min_value=0.0, allow_nan=False, allow_infinity=False))
def test_format_is_short(seconds: float) -> None:
    # 6 digits, a point, an exponent and a unit at most.
    assert len(format_duration(seconds)) <= len("1.23456e+303ms")


@given(
    st.decimals(min_value=0, max_value=10**9, allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "ms", "s", "m", "h", "d"]),
)
def test_parse_decimal_with_unit(number: object, unit: str) -> None:
    text = f"{number}{unit}"
    expected = float(str(number)) * UNITS.get(unit, 1.0)
    assert parse_duration(text) == pytest.approx(expected, rel=1e-12)


@given(st.text(max_size=30))
def test_garbage_text_only_raises_value_error(text: str) -> None:
    try:
        result = parse_duration(text)
    except ValueError as exc:
        assert "\n" not in str(exc)
    else:
        assert result >= 0
        assert not math.isnan(result)


@given(st.text(alphabet="0123456789.eE+-xXpPabcdfinmsthy()_ ", max_size=20))
def test_number_like_garbage_only_raises_value_error(text: str) -> None:
    try:
        result = parse_duration(text)
    except ValueError:
        return
    assert result >= 0
    assert not math.isnan(result)
