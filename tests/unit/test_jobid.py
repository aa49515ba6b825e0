"""Tests for fluxes.formats.jobid: RFC 19 FLUID generation and job id encodings."""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.formats import jobid
from fluxes.formats._mnemonic_words import BASE_WORDS, WORDS
from fluxes.formats.jobid import (
    DEFAULT_EPOCH_MS,
    FORMS,
    MAX_BULK,
    MAX_ID,
    FluidGenerator,
    encode,
    fluid_generator,
    fluid_sequence,
    fluid_timestamp,
    parse,
)

# Each row: the id, then its text in FORMS order.  The rows are the vectors
# flux-core's own tests check (t/python/t0010-job.py, t/t2201-job-cmd.t), and
# the examples of RFC 19 (where each example list is given in the same order
# for every encoding, so the n-th examples are the same id).
VECTORS: list[tuple[int, str, str, str, str, str, str]] = [
    (
        0,
        "0",
        "0x0",
        "0000.0000.0000.0000",
        "job.0000.0000.0000.0000",
        "ƒ1",
        "academy-academy-academy--academy-academy-academy",
    ),
    (
        1,
        "1",
        "0x1",
        "0000.0000.0000.0001",
        "job.0000.0000.0000.0001",
        "ƒ2",
        "acrobat-academy-academy--academy-academy-academy",
    ),
    (
        65535,
        "65535",
        "0xffff",
        "0000.0000.0000.ffff",
        "job.0000.0000.0000.ffff",
        "ƒLUv",
        "nevada-archive-academy--academy-academy-academy",
    ),
    (
        6787342413402046,
        "6787342413402046",
        "0x181d0d4d850fbe",
        "0018.1d0d.4d85.0fbe",
        "job.0018.1d0d.4d85.0fbe",
        "ƒuzzybunny",
        "cake-plume-nepal--neuron-pencil-academy",
    ),
    (
        6731191091817518,
        "6731191091817518",
        "0x17e9fb8df16c2e",
        "0017.e9fb.8df1.6c2e",
        "job.0017.e9fb.8df1.6c2e",
        "ƒuZZybuNNy",
        "reform-remote-galileo--heart-package-academy",
    ),
    (
        4181414752813056,
        "4181414752813056",
        "0xedaf97d000000",
        "000e.daf9.7d00.0000",
        "job.000e.daf9.7d00.0000",
        "ƒZemgA8Bzf",
        "random-idea-yoyo--sugar-printer-academy",
    ),
    (
        6705031151616,
        "6705031151616",
        "0x61923000000",
        "0000.0619.2300.0000",
        "job.0000.0619.2300.0000",
        "ƒ438XeGbh",
        "garage-combat-disney--stand-academy-academy",
    ),
    (
        18446744073709551614,
        "18446744073709551614",
        "0xfffffffffffffffe",
        "ffff.ffff.ffff.fffe",
        "job.ffff.ffff.ffff.fffe",
        "ƒjpXCZedGfVP",
        "mustang-analyze-verbal--natural-analyze-verbal",
    ),
    (
        18446744073709551615,
        "18446744073709551615",
        "0xffffffffffffffff",
        "ffff.ffff.ffff.ffff",
        "job.ffff.ffff.ffff.ffff",
        "ƒjpXCZedGfVQ",
        "natural-analyze-verbal--natural-analyze-verbal",
    ),
]

CASES = [(row[0], form, text) for row in VECTORS for form, text in zip(FORMS, row[1:], strict=True)]

ids64 = st.integers(min_value=0, max_value=MAX_ID)


# --------------------------------------------------------------------------
# Word list


def test_word_list_shape() -> None:
    assert len(WORDS) == BASE_WORDS + 7 == 1633
    assert len(set(WORDS)) == len(WORDS)
    assert all(w.isascii() and w.isalpha() and w.islower() for w in WORDS)
    assert WORDS[:2] == ("academy", "acrobat")
    assert WORDS[BASE_WORDS - 1] == "amen"
    assert WORDS[BASE_WORDS:] == ("ego", "fax", "jet", "job", "rio", "ski", "yes")


# --------------------------------------------------------------------------
# Encoding and parsing: fixed vectors


@pytest.mark.parametrize(("value", "form", "text"), CASES)
def test_encode_vectors(value: int, form: str, text: str) -> None:
    assert encode(value, form) == text


@pytest.mark.parametrize(("value", "form", "text"), CASES)
def test_parse_vectors(value: int, form: str, text: str) -> None:
    assert parse(text) == value
    assert parse(f" \t{text}\n ") == value


def test_encode_default_form_is_dec() -> None:
    assert encode(42) == "42"


def test_forms_are_case_insensitive() -> None:
    assert encode(65535, "HEX") == "0xffff"
    assert encode(1, "F58") == "ƒ2"


def test_f58plain_and_ascii_prefix() -> None:
    assert encode(MAX_ID, "f58plain") == "fjpXCZedGfVQ"
    assert encode(0, "f58plain") == "f1"
    assert parse("fjpXCZedGfVQ") == MAX_ID
    assert parse("f1") == 0
    assert parse("fuzzybunny") == 6787342413402046


def test_parse_accepts_flux_variants() -> None:
    assert parse("0x00ff") == 255
    assert parse("0xFF") == 255
    assert parse("007") == 7
    assert parse("FFFF.FFFF.FFFF.FFFF") == MAX_ID
    assert parse("0.0.0.1") == 1
    assert parse("job.42") == 42  # flux drops "job." before detecting
    assert parse("CAKE-Plume-nepal--neuron-pencil-academy") == 6787342413402046
    assert parse("cake plume nepal -- neuron pencil academy") == 6787342413402046
    assert parse("f111") == 0


def test_words_are_always_six() -> None:
    for value in (0, 1, 1 << 32, MAX_ID):
        assert len(encode(value, "words").replace("--", "-").split("-")) == 6


# --------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("form", FORMS)
@given(value=ids64)
def test_round_trip(form: str, value: int) -> None:
    assert parse(encode(value, form)) == value


@given(value=ids64)
def test_round_trip_f58plain(value: int) -> None:
    assert parse(encode(value, "f58plain")) == value


@given(value=ids64)
def test_dothex_and_hex_agree(value: int) -> None:
    assert int(encode(value, "dothex").replace(".", ""), 16) == value
    assert int(encode(value, "hex"), 16) == value
    assert encode(value, "kvs") == "job." + encode(value, "dothex")


# --------------------------------------------------------------------------
# Bad input


BAD_TEXT = [
    "",
    "   ",
    "job.",
    "badstring",
    "meep",
    "42plusbad",
    "18446744073709551616",
    "99999999999999999999999",
    "-1",
    "+1",
    "1_000",
    "١٢٣",  # non-ASCII digits
    "0x",
    "0X10",
    "0x10000000000000000",
    "0xg",
    "job.0000.0000",
    "job.0000.0000.0000.000P",
    "0000.0000.0000.00000",
    "0000..0000.0000",
    "1.2.3.4.5",
    "bad-words",
    "a-a-a--a-a-a",
    "academy-academy-academy--academy-academy",
    "academy-academy-academy--academy-academy-academy-academy",
    "academy-academy-yes--academy-academy-academy",
    "academy-academy-amen--academy-academy-academy",  # group above 2^32 - 1
    "neon-analyze-verbal--academy-academy-academy",  # 2^32 exactly
    "f",
    "ƒ",
    "f0",
    "fO",
    "fl",
    "ƒI",
    "fjpXCZedGfVR",  # 2^64
    "f1111111111111",  # 13 digits
    "fzzzzzzzzzzzz",
    "🚹💂🙌😳💱🏃",
    "4 2",
    "42\x00",
    "x" * 100_000,
    "1" * 100_000,
]


@pytest.mark.parametrize("text", BAD_TEXT)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid job id") as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message
    assert len(message) < 200


def test_error_names_the_text() -> None:
    with pytest.raises(ValueError, match="'meep'"):
        parse("meep")


@given(text=st.text(max_size=40))
def test_parse_garbage_only_raises_value_error(text: str) -> None:
    try:
        value = parse(text)
    except ValueError as err:
        assert "\n" not in str(err)
    else:
        assert 0 <= value <= MAX_ID


NEAR_MISS_PIECES = [*"0123456789abcdefABCDEFxjob.-ƒf \t", "0x", "job.", "academy", "yes", "verbal"]


@given(pieces=st.lists(st.sampled_from(NEAR_MISS_PIECES), max_size=30))
def test_parse_near_misses_only_raise_value_error(pieces: list[str]) -> None:
    text = "".join(pieces)
    try:
        value = parse(text)
    except ValueError:
        return
    assert 0 <= value <= MAX_ID


@pytest.mark.parametrize("bad", [None, 42, b"42", 4.0])
def test_parse_non_string(bad: object) -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, MAX_ID + 1, 1.0, "1", None, True])
def test_encode_bad_id(bad: object) -> None:
    with pytest.raises(ValueError, match="job id"):
        encode(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("form", ["", "emoji", "decimal", "f 58", None])
def test_encode_bad_form(form: object) -> None:
    with pytest.raises(ValueError, match="form"):
        encode(1, form)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Fields of an id


def test_fields() -> None:
    value = (12345 << 24) | (77 << 10) | 9
    assert fluid_generator(value) == 77
    assert fluid_sequence(value) == 9
    assert fluid_timestamp(value) == (DEFAULT_EPOCH_MS + 12345) / 1000
    assert fluid_timestamp(value, epoch_ms=0) == 12.345


@pytest.mark.parametrize("bad", [-1, MAX_ID + 1, "1"])
def test_fields_bad_id(bad: object) -> None:
    for func in (fluid_timestamp, fluid_generator, fluid_sequence):
        with pytest.raises(ValueError):
            func(bad)  # type: ignore[arg-type]


def test_timestamp_bad_epoch() -> None:
    with pytest.raises(ValueError, match="epoch_ms"):
        fluid_timestamp(1, epoch_ms=-1)


# --------------------------------------------------------------------------
# Generation


class FakeClock:
    """A settable clock in seconds since the UNIX epoch."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


EPOCH = 1_700_000_000_000


def make(gen_id: int = 5, start_ms: int = EPOCH + 1000) -> tuple[FluidGenerator, FakeClock]:
    clock = FakeClock(start_ms)
    return FluidGenerator(gen_id, epoch_ms=EPOCH, clock=clock), clock


def test_generator_layout() -> None:
    gen, clock = make(gen_id=300, start_ms=EPOCH + 4242)
    first = gen.next()
    assert fluid_generator(first) == 300
    assert fluid_sequence(first) == 0
    assert first >> 24 == 4242
    assert fluid_timestamp(first, epoch_ms=EPOCH) == (EPOCH + 4242) / 1000
    assert fluid_sequence(gen.next()) == 1
    clock.ms += 1
    nxt = gen.next()
    assert nxt >> 24 == 4243
    assert fluid_sequence(nxt) == 0


def test_generator_properties_and_defaults() -> None:
    gen = FluidGenerator(7)
    assert gen.generator_id == 7
    assert gen.epoch_ms == DEFAULT_EPOCH_MS
    assert "generator_id=7" in repr(gen)
    a, b = gen.next(), gen.next()
    assert a < b
    assert fluid_generator(a) == 7
    # made "now" with the real clock: within a minute of the time module's idea
    import time

    assert abs(fluid_timestamp(a) - time.time()) < 60


def test_sequence_exhaustion_borrows_ahead() -> None:
    gen, clock = make()
    ids = [gen.next() for _ in range(3000)]  # the clock never moves
    assert ids == sorted(set(ids))
    assert [i >> 24 for i in ids[:1024]] == [1000] * 1024
    assert ids[1024] >> 24 == 1001
    assert fluid_sequence(ids[1024]) == 0
    assert ids[-1] >> 24 == 1002
    # once the clock passes the borrowed timestamps, it is used again
    clock.ms += 10
    assert gen.next() >> 24 == 1010


def test_clock_going_backwards() -> None:
    gen, clock = make()
    before = gen.next_n(10)
    clock.ms -= 500
    after = gen.next_n(2000)
    assert after[0] > before[-1]
    assert before + after == sorted(set(before + after))
    assert all(i >> 24 >= 1000 for i in after)


def test_clock_before_epoch_still_works() -> None:
    gen, _ = make(start_ms=EPOCH - 5000)
    ids = [*gen.next_n(5), gen.next()]
    assert ids == sorted(set(ids))
    assert ids[0] >> 24 == 0


def test_next_n_matches_next() -> None:
    a, _ = make()
    b, _ = make()
    assert a.next_n(5000) == [b.next() for _ in range(5000)]


def test_next_n_zero_and_bulk() -> None:
    gen, _ = make()
    assert gen.next_n(0) == []
    ids = gen.next_n(100_000)
    assert len(ids) == 100_000
    assert all(x < y for x, y in itertools.pairwise(ids))
    assert {fluid_generator(i) for i in ids} == {5}


@pytest.mark.parametrize("bad", [-1, MAX_BULK + 1, 1.5, "3", True])
def test_next_n_bad(bad: object) -> None:
    gen, _ = make()
    with pytest.raises(ValueError, match="n"):
        gen.next_n(bad)  # type: ignore[arg-type]


@given(
    steps=st.lists(
        st.tuples(st.integers(min_value=-3000, max_value=3000), st.integers(0, 2500)),
        max_size=25,
    )
)
def test_generator_monotonic_under_any_clock(steps: list[tuple[int, int]]) -> None:
    gen, clock = make(start_ms=EPOCH + 10_000)
    issued: list[int] = []
    for delta, count in steps:
        clock.ms = max(0, clock.ms + delta)
        issued.extend(gen.next_n(count) if count != 1 else [gen.next()])
    assert all(x < y for x, y in itertools.pairwise(issued))
    assert all(fluid_generator(i) == 5 for i in issued)


@given(
    ids=st.lists(st.integers(0, 16383), min_size=2, max_size=4, unique=True),
    steps=st.lists(st.tuples(st.integers(-5, 5), st.integers(0, 1500)), max_size=10),
)
def test_distinct_generators_never_collide(ids: list[int], steps: list[tuple[int, int]]) -> None:
    clock = FakeClock(EPOCH + 100)
    gens = [FluidGenerator(i, epoch_ms=EPOCH, clock=clock) for i in ids]
    seen: set[int] = set()
    total = 0
    for delta, count in steps:
        clock.ms += delta
        for gen in gens:
            batch = gen.next_n(count)
            total += len(batch)
            seen.update(batch)
    assert len(seen) == total


def test_after_resumes_above_previous_ids() -> None:
    first, clock = make()
    old = first.next_n(5000)  # borrowed ahead to ts 1004
    clock.ms -= 200  # restart with a clock that went back
    second = FluidGenerator(5, epoch_ms=EPOCH, clock=clock, after=old[-1])
    assert second.next() > old[-1]
    assert min(second.next_n(3000)) > old[-1]


def test_after_max_id_is_exhausted() -> None:
    with pytest.raises(ValueError, match="no FLUIDs"):
        FluidGenerator(1, after=MAX_ID)


def test_timestamp_exhaustion() -> None:
    clock = FakeClock(EPOCH + (1 << 40) + 5)
    gen = FluidGenerator(1, epoch_ms=EPOCH, clock=clock)
    with pytest.raises(ValueError, match="exhausted"):
        gen.next()
    clock.ms = EPOCH + (1 << 40) - 1  # the very last millisecond
    last = gen.next_n(1024)
    assert last[-1] >> 24 == (1 << 40) - 1
    with pytest.raises(ValueError, match="exhausted"):
        gen.next()


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((-1,), {}, "generator_id"),
        ((16384,), {}, "generator_id"),
        (("1",), {}, "generator_id"),
        ((True,), {}, "generator_id"),
        ((1,), {"epoch_ms": -5}, "epoch_ms"),
        ((1,), {"epoch_ms": 1.5}, "epoch_ms"),
        ((1,), {"clock": 5}, "clock"),
        ((1,), {"after": -1}, "job id"),
    ],
)
def test_generator_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        FluidGenerator(*args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("reading", [float("nan"), float("inf"), None, "now"])
def test_generator_bad_clock_reading(reading: object) -> None:
    gen = FluidGenerator(1, clock=lambda: reading)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError, match="clock"):
        gen.next()


def test_generator_thread_safe() -> None:
    gen, _ = make()
    results: list[list[int]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        for _ in range(200):
            results[slot].append(gen.next())
            results[slot].extend(gen.next_n(7))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [i for r in results for i in r]
    assert len(set(everything)) == len(everything) == 4 * 200 * 8
    for r in results:
        assert r == sorted(r)


def _issue_ids(generator_id: int, count: int, start: Any, out: Any) -> None:
    """Child process: wait for the others, then issue ``count`` ids and send them back."""
    gen = FluidGenerator(generator_id)
    start.wait(timeout=60)
    ids = []
    for k in range(count):
        ids.append(gen.next())
        if k % 500 == 0:
            # A bulk request larger than one millisecond's 1024 sequence
            # numbers makes the generator borrow ahead of the clock.
            ids.extend(gen.next_n(1500))
    out.put((generator_id, ids))


def test_distinct_generators_in_real_processes_never_collide() -> None:
    # Real processes, started together, each with its own generator id: the
    # ids they issue in the same milliseconds differ only by generator id.
    ctx = multiprocessing.get_context("spawn")  # no fork of pytest's threads
    generator_ids = [1, 2, 77, jobid.MAX_GENERATOR_ID]
    count = 3000
    start = ctx.Barrier(len(generator_ids))
    out = ctx.Queue()
    procs = [ctx.Process(target=_issue_ids, args=(g, count, start, out))
             for g in generator_ids]
    for proc in procs:
        proc.start()
    try:
        # Drain before joining: a child cannot exit while its data is unread.
        results = dict(out.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0] * len(procs)
    assert sorted(results) == sorted(generator_ids)
    everything = [i for ids in results.values() for i in ids]
    per_process = count + 1500 * len(range(0, count, 500))
    assert len(everything) == len(set(everything)) == per_process * len(generator_ids)
    for generator_id, ids in results.items():
        assert len(ids) == per_process
        assert all(a < b for a, b in itertools.pairwise(ids)), generator_id
        assert {fluid_generator(i) for i in ids} == {generator_id}


def test_module_exports() -> None:
    assert set(jobid.__all__) <= set(dir(jobid))
