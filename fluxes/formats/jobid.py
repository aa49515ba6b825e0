"""Job ids: RFC 19 FLUIDs, their generation and their text encodings.

A FLUID is a 64-bit integer laid out as ``[timestamp:40 | generator:14 |
sequence:10]``: milliseconds since an epoch, the id of the generator that made
it, and a per-millisecond counter.  Ids from one generator are strictly
increasing; ids from generators with distinct generator ids never collide.

The text forms are the ones ``flux job id`` prints and accepts, byte for byte:

=========  ==========================================  =========================
form       example (id 6787342413402046)               note
=========  ==========================================  =========================
dec        ``6787342413402046``                        decimal
hex        ``0x181d0d4d850fbe``                        lowercase, ``0x`` prefix
dothex     ``0018.1d0d.4d85.0fbe``                     four groups of 4 hex digits
kvs        ``job.0018.1d0d.4d85.0fbe``                 ``job.`` + dothex
f58        ``ƒuzzybunny``                              ``ƒ`` + base58 (flux alphabet)
words      ``cake-plume-nepal--neuron-pencil-academy`` mnemonicode, six words
=========  ==========================================  =========================

:func:`parse` auto-detects any of them, as ``flux_job_id_parse`` does.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable

from fluxes.formats._mnemonic_words import BASE_WORDS, WORDS
from fluxes.formats.shown import shown as _show

__all__ = [
    "DEFAULT_EPOCH_MS",
    "FORMS",
    "GENERATOR_BITS",
    "MAX_BULK",
    "MAX_GENERATOR_ID",
    "MAX_ID",
    "OUTPUT_FORMS",
    "SEQUENCE_BITS",
    "TIMESTAMP_BITS",
    "FluidGenerator",
    "encode",
    "fluid_generator",
    "fluid_sequence",
    "fluid_timestamp",
    "parse",
]

#: The encodings ``encode`` produces and ``parse`` recognises.
FORMS: tuple[str, ...] = ("dec", "hex", "dothex", "kvs", "f58", "words")
#: The encodings ``encode`` produces: FORMS and flux's ASCII-only ``f58plain``.
OUTPUT_FORMS: tuple[str, ...] = (*FORMS, "f58plain")

TIMESTAMP_BITS = 40
GENERATOR_BITS = 14
SEQUENCE_BITS = 10

MAX_ID = (1 << 64) - 1
MAX_GENERATOR_ID = (1 << GENERATOR_BITS) - 1
MAX_TIMESTAMP_MS = (1 << TIMESTAMP_BITS) - 1
SEQUENCE_SIZE = 1 << SEQUENCE_BITS

#: Default FLUID epoch: 2025-01-01T00:00:00Z in ms since the UNIX epoch.
#: 40 bits of milliseconds then last about 34.8 years, until late 2059.
DEFAULT_EPOCH_MS = 1_735_689_600_000

#: Largest ``n`` accepted by :meth:`FluidGenerator.next_n` in one call.
MAX_BULK = 1_000_000

_TS_SHIFT = GENERATOR_BITS + SEQUENCE_BITS

_B58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_VALUE = {c: i for i, c in enumerate(_B58_ALPHABET)}
_F58_PREFIX = "ƒ"  # U+0192
_F58_ASCII_PREFIX = "f"
# flux refuses longer F58 digit strings; 11 digits already cover 2^64 - 1.
_F58_MAX_DIGITS = 12

_WORD_INDEX = {word: i for i, word in enumerate(WORDS)}
_WORDS_PER_ID = 6

# C isspace() in the "C" locale: flux strips exactly these.
_SPACE = " \t\n\v\f\r"

_DEC_RE = re.compile(r"[0-9]+")
_HEX_RE = re.compile(r"0x([0-9A-Fa-f]+)")
_DOTHEX_RE = re.compile(r"\.".join([r"([0-9A-Fa-f]{1,4})"] * 4))
_NON_LETTERS_RE = re.compile(r"[^A-Za-z]+")


# --------------------------------------------------------------------------
# Encoding


def _check_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"job id must be an integer, not {type(value).__name__}")
    if not 0 <= value <= MAX_ID:
        raise ValueError(f"job id {value} is out of range 0..{MAX_ID}")
    return value


def _f58_digits(value: int) -> str:
    if value == 0:
        return _B58_ALPHABET[0]
    out: list[str] = []
    while value:
        value, rem = divmod(value, 58)
        out.append(_B58_ALPHABET[rem])
    return "".join(reversed(out))


def _words(value: int) -> str:
    # mnemonicode reads the id as the 8 bytes of a little-endian uint64 (as
    # flux does on every platform it runs on): two 32-bit groups, low one
    # first, each written as three base-1626 digits, least significant first.
    groups = []
    for group in (value & 0xFFFFFFFF, value >> 32):
        first, rest = group % BASE_WORDS, group // BASE_WORDS
        second, third = rest % BASE_WORDS, rest // BASE_WORDS
        groups.append(f"{WORDS[first]}-{WORDS[second]}-{WORDS[third]}")
    return "--".join(groups)


def _dothex(value: int) -> str:
    return (
        f"{value >> 48 & 0xFFFF:04x}.{value >> 32 & 0xFFFF:04x}."
        f"{value >> 16 & 0xFFFF:04x}.{value & 0xFFFF:04x}"
    )


def encode(id: int, form: str = "dec") -> str:
    """Return job id ``id`` as text in encoding ``form`` (one of :data:`FORMS`).

    The output is identical to ``flux job id --to=FORM``; ``f58`` uses the
    ``ƒ`` prefix (flux in a UTF-8 locale).  ``form`` is case-insensitive, and
    ``"f58plain"`` gives F58 with the ASCII ``f`` prefix, as flux prints
    outside a UTF-8 locale.  Raises ``ValueError`` for an unknown form or an
    id outside ``0 .. 2**64 - 1``.
    """
    value = _check_id(id)
    if not isinstance(form, str):
        raise ValueError(f"job id form must be a string, not {type(form).__name__}")
    kind = form.lower()
    if kind == "dec":
        return str(value)
    if kind == "hex":
        return f"0x{value:x}"
    if kind == "dothex":
        return _dothex(value)
    if kind == "kvs":
        return "job." + _dothex(value)
    if kind == "f58":
        return _F58_PREFIX + _f58_digits(value)
    if kind == "f58plain":
        return _F58_ASCII_PREFIX + _f58_digits(value)
    if kind == "words":
        return _words(value)
    raise ValueError(f"unknown job id form {form!r}: expected one of {', '.join(FORMS)}")


# --------------------------------------------------------------------------
# Parsing


class _BadIdError(Exception):
    """Internal: a reason why some text is not a job id."""


def _parse_dec(body: str) -> int:
    if not _DEC_RE.fullmatch(body):
        raise _BadIdError("not a decimal number")
    digits = body.lstrip("0") or "0"
    if len(digits) > 20 or int(digits) > MAX_ID:
        raise _BadIdError("larger than 2^64 - 1")
    return int(digits)


def _parse_hex(body: str) -> int:
    match = _HEX_RE.fullmatch(body)
    if match is None:
        raise _BadIdError("bad hexadecimal number")
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > 16:
        raise _BadIdError("larger than 2^64 - 1")
    return int(digits, 16)


def _parse_dothex(body: str) -> int:
    match = _DOTHEX_RE.fullmatch(body)
    if match is None:
        raise _BadIdError("dotted hex needs four groups of 1-4 hex digits")
    value = 0
    for group in match.groups():
        value = value << 16 | int(group, 16)
    return value


def _parse_f58(body: str) -> int:
    digits = body[1:]
    if not digits:
        raise _BadIdError("no base58 digits after the F58 prefix")
    if len(digits) > _F58_MAX_DIGITS:
        raise _BadIdError("too many base58 digits")
    value = 0
    for char in digits:
        digit = _B58_VALUE.get(char)
        if digit is None:
            raise _BadIdError(f"{char!r} is not a base58 digit")
        value = value * 58 + digit
    if value > MAX_ID:
        raise _BadIdError("larger than 2^64 - 1")
    return value


def _parse_words(body: str) -> int:
    # As in mnemonicode, words are runs of ASCII letters in any case and
    # anything else separates them.
    tokens = [t for t in _NON_LETTERS_RE.split(body) if t]
    if len(tokens) != _WORDS_PER_ID:
        raise _BadIdError(f"expected {_WORDS_PER_ID} mnemonic words, found {len(tokens)}")
    digits: list[int] = []
    for token in tokens:
        index = _WORD_INDEX.get(token.lower())
        if index is None:
            raise _BadIdError(f"unknown mnemonic word {token!r}")
        if index >= BASE_WORDS:
            raise _BadIdError(f"mnemonic word {token!r} only ends 24-bit data, never a job id")
        digits.append(index)
    value = 0
    for shift, (a, b, c) in ((0, digits[0:3]), (32, digits[3:6])):
        group = a + BASE_WORDS * (b + BASE_WORDS * c)
        if group > 0xFFFFFFFF:
            raise _BadIdError("mnemonic words encode more than 32 bits per group")
        value |= group << shift
    return value


def parse(text: str) -> int:
    """Return the job id written in ``text`` in any encoding of :data:`FORMS`.

    The encoding is detected like flux's ``flux_job_id_parse``: surrounding
    whitespace is ignored and a leading ``job.`` is dropped; then text with a
    ``.`` is dothex, text with a ``-`` is words, text starting with ``ƒ`` or
    ``f`` is F58, text starting with ``0x`` is hex, and anything else decimal.
    Raises ``ValueError`` naming ``text`` if it is not a valid job id.
    """
    if not isinstance(text, str):
        raise ValueError(f"job id must be a string, not {type(text).__name__}")
    body = text.strip(_SPACE)
    if body.startswith("job."):
        body = body[4:]
    try:
        if not body:
            raise _BadIdError("empty")
        if "." in body:
            return _parse_dothex(body)
        if "-" in body:
            return _parse_words(body)
        if body[0] in (_F58_PREFIX, _F58_ASCII_PREFIX):
            return _parse_f58(body)
        if "\U0001f000" <= body[0] <= "\U0001ffff":
            raise _BadIdError("the emoji encoding is not supported")
        if body.startswith("0x"):
            return _parse_hex(body)
        return _parse_dec(body)
    except _BadIdError as err:
        raise ValueError(f"invalid job id {_show(text)}: {err}") from None


# --------------------------------------------------------------------------
# Fields of an id


def fluid_timestamp(id: int, epoch_ms: int = DEFAULT_EPOCH_MS) -> float:
    """Return when FLUID ``id`` was made, in seconds since the UNIX epoch.

    ``epoch_ms`` must be the epoch of the generator that made the id.
    """
    value = _check_id(id)
    return (_check_epoch(epoch_ms) + (value >> _TS_SHIFT)) / 1000.0


def fluid_generator(id: int) -> int:
    """Return the generator id (0 .. 16383) of the generator that made FLUID ``id``."""
    return (_check_id(id) >> SEQUENCE_BITS) & MAX_GENERATOR_ID


def fluid_sequence(id: int) -> int:
    """Return the sequence number (0 .. 1023) of FLUID ``id`` within its millisecond."""
    return _check_id(id) & (SEQUENCE_SIZE - 1)


# --------------------------------------------------------------------------
# Generation


def _check_epoch(epoch_ms: object) -> int:
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int):
        raise ValueError(f"epoch_ms must be an integer, not {type(epoch_ms).__name__}")
    if epoch_ms < 0:
        raise ValueError(f"epoch_ms must not be negative, got {epoch_ms}")
    return epoch_ms


class FluidGenerator:
    """Issues RFC 19 FLUIDs: unique, strictly increasing 64-bit job ids.

    ``generator_id`` (0 .. 16383) goes into every id, so generators with
    distinct ids (one per process) never collide.  ``epoch_ms`` is the
    timestamp zero in ms since the UNIX epoch (default
    :data:`DEFAULT_EPOCH_MS`); ``clock`` returns seconds since the UNIX epoch.

    When the 1024 sequence numbers of a millisecond are used up, the
    generator *borrows ahead*: it moves on to the next millisecond at once
    instead of sleeping (flux busy-waits), so bulk allocation never blocks and
    a stuck clock cannot hang it; the id timestamps run ahead of the clock by
    at most ``burst / 1024`` ms until the clock catches up.  When the clock
    goes backwards, the generator keeps counting from its last timestamp, so
    it never issues an id smaller than one it issued before.

    A restarted process can pass ``after``, the largest id its predecessor
    with the same generator id issued, and all new ids will be larger even if
    that predecessor had borrowed ahead or the clock has gone back since.
    The generator is thread-safe.
    """

    def __init__(
        self,
        generator_id: int,
        epoch_ms: int | None = None,
        clock: Callable[[], float] = time.time,
        *,
        after: int | None = None,
    ) -> None:
        """Create a generator; see the class docstring for the arguments."""
        if isinstance(generator_id, bool) or not isinstance(generator_id, int):
            raise ValueError(f"generator_id must be an integer, not {type(generator_id).__name__}")
        if not 0 <= generator_id <= MAX_GENERATOR_ID:
            raise ValueError(f"generator_id {generator_id} is out of range 0..{MAX_GENERATOR_ID}")
        if not callable(clock):
            raise ValueError("clock must be a callable returning seconds since the UNIX epoch")
        self._generator_id = generator_id
        self._epoch_ms = DEFAULT_EPOCH_MS if epoch_ms is None else _check_epoch(epoch_ms)
        self._clock = clock
        self._prefix = generator_id << SEQUENCE_BITS
        self._lock = threading.Lock()
        # _ts is the timestamp of the newest id issued (or the floor for the
        # next one) and _seq the next free sequence number within it.
        self._ts = 0
        self._seq = 0
        if after is not None:
            floor = (_check_id(after) >> _TS_SHIFT) + 1
            if floor > MAX_TIMESTAMP_MS:
                raise ValueError(f"no FLUIDs are left after {after}")
            self._ts = floor

    @property
    def generator_id(self) -> int:
        """The generator id placed in every FLUID this generator issues."""
        return self._generator_id

    @property
    def epoch_ms(self) -> int:
        """The FLUID epoch in milliseconds since the UNIX epoch."""
        return self._epoch_ms

    def _now_ms(self) -> int:
        seconds = self._clock()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ValueError(f"clock returned {seconds!r}, not a number of seconds")
        if not math.isfinite(seconds):
            raise ValueError(f"clock returned {seconds!r}, not a finite number of seconds")
        # A clock before the epoch counts as timestamp 0 rather than an error:
        # the ids stay valid and increasing, just bunched at the start.
        return max(0, math.floor(seconds * 1000) - self._epoch_ms)

    def _advance_to_now(self) -> None:
        now = self._now_ms()
        if now > self._ts:
            if now > MAX_TIMESTAMP_MS:
                raise ValueError(
                    f"FLUID timestamps are exhausted: the clock is more than 2^40 ms "
                    f"past epoch {self._epoch_ms}"
                )
            self._ts = now
            self._seq = 0

    def _borrow(self) -> None:
        if self._ts >= MAX_TIMESTAMP_MS:
            raise ValueError(
                f"FLUID timestamps are exhausted: no ids are left after "
                f"2^40 ms past epoch {self._epoch_ms}"
            )
        self._ts += 1
        self._seq = 0

    def next(self) -> int:
        """Return a new FLUID, larger than every id this generator issued before."""
        with self._lock:
            self._advance_to_now()
            if self._seq >= SEQUENCE_SIZE:
                self._borrow()
            fluid = self._ts << _TS_SHIFT | self._prefix | self._seq
            self._seq += 1
            return fluid

    def next_n(self, n: int) -> list[int]:
        """Return ``n`` new FLUIDs in increasing order (bulk submission).

        ``n`` may be 0 .. :data:`MAX_BULK`.  The ids within one millisecond are
        consecutive integers, so this costs about one step per 1024 ids.
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"n must be an integer, not {type(n).__name__}")
        if not 0 <= n <= MAX_BULK:
            raise ValueError(f"n {n} is out of range 0..{MAX_BULK}")
        out: list[int] = []
        if n == 0:
            return out
        with self._lock:
            self._advance_to_now()
            remaining = n
            while remaining:
                if self._seq >= SEQUENCE_SIZE:
                    self._borrow()
                take = min(remaining, SEQUENCE_SIZE - self._seq)
                first = self._ts << _TS_SHIFT | self._prefix | self._seq
                out.extend(range(first, first + take))
                self._seq += take
                remaining -= take
        return out

    def __repr__(self) -> str:
        """Show the generator id and epoch."""
        return f"FluidGenerator(generator_id={self._generator_id}, epoch_ms={self._epoch_ms})"
