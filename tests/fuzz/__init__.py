"""Hostile-input fuzz tests: every parser and stream decoder fed garbage.

Shared helpers live here: the example budget (``FLUXES_FUZZ_EXAMPLES``), the
hang guard, the check that a rejection is a clean one-line ValueError, and
hypothesis strategies for JSON-like values and mutated valid documents.
See ``docs/hostile-input.md``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

T = TypeVar("T")

#: Examples per fuzz test in the regular suite; raise it for long sessions,
#: e.g. ``FLUXES_FUZZ_EXAMPLES=200000 pytest tests/fuzz``.
EXAMPLES = int(os.environ.get("FLUXES_FUZZ_EXAMPLES", "150"))

#: One example running longer than this is a hang (or a blow-up), not slowness:
#: every input is size-bounded, and the slowest legitimate one takes milliseconds.
HANG_SECONDS = float(os.environ.get("FLUXES_FUZZ_HANG_SECONDS", "10"))

#: Longest error message accepted: one clear line, not a dump of the input.
MAX_MESSAGE = 1000


def fuzz_settings(factor: float = 1.0) -> settings:
    """Hypothesis settings for a fuzz test: ``factor`` x the example budget, no deadline.

    The per-example deadline is off because a loaded CI machine makes it
    flaky; :func:`hang_guard` catches real hangs instead.
    """
    return settings(
        max_examples=max(1, int(EXAMPLES * factor)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much],
    )


class HangError(Exception):
    """An example ran longer than :data:`HANG_SECONDS` (not a ValueError on purpose)."""


@contextmanager
def hang_guard(seconds: float = HANG_SECONDS) -> Iterator[None]:
    """Raise HangError in the block if it runs longer than ``seconds``.

    Uses SIGALRM, so it only guards on the main thread of a POSIX process;
    elsewhere the block just runs.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _expired(signum: int, frame: Any) -> None:
        raise HangError(f"example ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_message(exc: BaseException) -> str:
    """Assert ``exc`` carries a clear one-line message; return it."""
    text = str(exc)
    assert text.strip(), f"{type(exc).__name__} with an empty message"
    # splitlines, not just "\n": the ingest worker replies with splitlines()[0]
    assert len(text.splitlines()) == 1, f"message is not one line: {text!r:.300}"
    assert len(text) <= MAX_MESSAGE, f"message is {len(text)} characters: {text[:200]!r}..."
    return text


def outcome(func: Callable[..., T], *args: Any, **kwargs: Any) -> T | ValueError:
    """Call ``func``; return its result or the ValueError it raised (after checking it).

    Any other exception propagates and fails the test; so does a hang.
    """
    with hang_guard():
        try:
            return func(*args, **kwargs)
        except ValueError as exc:
            check_message(exc)
            return exc


# -- strategies ---------------------------------------------------------------------

#: Integers orjson can read and write (what a JSON stream entry can carry).
JSON_INTS = st.integers(-(2**63), 2**64 - 1)

#: Interesting integers: boundaries of the id, count and 64-bit ranges.
EDGE_INTS = st.sampled_from([
    0, 1, -1, 2, 31, 32, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1, 2**32, 2**53, 2**63 - 1,
    2**63, -(2**63), 2**64 - 1,
])

FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 1.5, 4294967295.0]),
)

#: Short text with a bias to the characters the RFC grammars care about.
GRAMMAR_CHARS = "0123456789,-[]:+^*.?&=;|!/ \t\nabcxyzfƒ\x00\ud800é"


def grammar_text(chars: str = GRAMMAR_CHARS, max_size: int = 60) -> st.SearchStrategy[str]:
    """Short strings mostly from ``chars``, sometimes any unicode."""
    return st.one_of(
        st.text(alphabet=chars, max_size=max_size),
        st.text(max_size=max_size),
    )


def _json_scalars(big_ints: bool = False, nonfinite: bool = False) -> st.SearchStrategy[Any]:
    ints = st.one_of(JSON_INTS, EDGE_INTS)
    if big_ints:
        ints = st.one_of(ints, st.integers(-(2**200), 2**200))
    floats = st.floats(allow_nan=nonfinite, allow_infinity=nonfinite)
    return st.one_of(st.none(), st.booleans(), ints, floats, grammar_text(max_size=20))


def json_values(max_leaves: int = 20, big_ints: bool = False,
                nonfinite: bool = False) -> st.SearchStrategy[Any]:
    """Arbitrary JSON-like values (str keys); optionally ints beyond 64 bits and NaN/inf."""
    return st.recursive(
        _json_scalars(big_ints, nonfinite),
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.dictionaries(grammar_text(max_size=12), inner, max_size=5),
        ),
        max_leaves=max_leaves,
    )


def json_objects(max_leaves: int = 20) -> st.SearchStrategy[dict[str, Any]]:
    """Arbitrary JSON objects."""
    return st.dictionaries(grammar_text(max_size=12), json_values(max_leaves), max_size=6)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys/indexes) to a value inside ``obj``, the root included."""
    out: list[tuple[Any, ...]] = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_mutations: int = 3,
            values: st.SearchStrategy[Any] | None = None) -> Any:
    """``base`` (a JSON-like document) with a few values replaced, deleted or added.

    Mutating valid documents reaches the deep checks that random structures
    never get past the first ``missing key`` test.
    """
    doc = _copy(base)
    values = values if values is not None else json_values(8)
    for _ in range(draw(st.integers(0, max_mutations))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            replacement = draw(values)
            if draw(st.booleans()):
                return replacement
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        last = path[-1]
        action = draw(st.sampled_from(["replace", "delete", "add", "dup"]))
        if action == "replace":
            parent[last] = draw(values)
        elif action == "delete":
            del parent[last]
        elif action == "dup" and isinstance(parent, list):
            parent.append(_copy(parent[last]))
        elif isinstance(parent, dict):
            parent[draw(grammar_text(max_size=10))] = draw(values)
        else:
            parent.insert(last, draw(values))
    return doc


def to_json_bytes(value: Any) -> bytes:
    """JSON text of ``value``; a lone surrogate comes out escaped (which readers refuse)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value).encode()
