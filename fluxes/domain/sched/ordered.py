"""A sorted collection of order keys, for the scheduler's per-queue indexes (pure).

:class:`SortedKeys` keeps comparable keys (the policies' ``(-priority, t_submit,
id)`` tuples) in order as a list of chunks of at most ``2 * LOAD`` keys each, so
that adding or removing a key moves at most one chunk's worth of references (a
flat list would move the whole queue's on every submit of a million-job queue),
the k-th key is found by walking the chunks' lengths, and the keys between two
bounds are read in order from a bisection.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["LOAD", "SortedKeys"]

#: Half the most keys a chunk holds (a full chunk splits in two of this size).
LOAD: Final = 512


class SortedKeys:
    """Distinct keys in ascending order (see the module); ``len()`` is their count."""

    __slots__ = ("_chunks", "_maxes", "_size")

    def __init__(self) -> None:
        """No keys."""
        self._chunks: list[list[Any]] = []
        self._maxes: list[Any] = []
        self._size = 0

    def __len__(self) -> int:
        """How many keys are held."""
        return self._size

    def add(self, key: Any) -> None:
        """Insert *key* (it must not be held already)."""
        chunks, maxes = self._chunks, self._maxes
        self._size += 1
        if not chunks:
            chunks.append([key])
            maxes.append(key)
            return
        i = bisect_left(maxes, key)
        if i == len(maxes):
            i -= 1
            chunks[i].append(key)
            maxes[i] = key
        else:
            insort(chunks[i], key)
        chunk = chunks[i]
        if len(chunk) > 2 * LOAD:
            chunks[i:i + 1] = [chunk[:LOAD], chunk[LOAD:]]
            maxes[i:i + 1] = [chunk[LOAD - 1], chunk[-1]]

    def remove(self, key: Any) -> bool:
        """Drop *key*; False if it was not held."""
        chunks, maxes = self._chunks, self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return False
        chunk = chunks[i]
        j = bisect_left(chunk, key)
        if j == len(chunk) or chunk[j] != key:
            return False
        del chunk[j]
        self._size -= 1
        if not chunk:
            del chunks[i]
            del maxes[i]
        elif j == len(chunk):
            maxes[i] = chunk[-1]
        return True

    def kth(self, k: int) -> Any:
        """The key with *k* keys before it (IndexError if there is none)."""
        if k < 0:
            raise IndexError(k)
        for chunk in self._chunks:
            if k < len(chunk):
                return chunk[k]
            k -= len(chunk)
        raise IndexError(k)

    def first_between(self, low: Any | None, high: Any) -> Any | None:
        """The first key above *low* (None: from the first) if it is not above *high*;
        None if there is none (what ``next(between(low, high), None)`` gives, with no
        iterator made)."""
        chunks = self._chunks
        if not chunks:
            return None
        if low is None:
            key = chunks[0][0]
        else:
            i = bisect_right(self._maxes, low)
            if i == len(chunks):
                return None
            chunk = chunks[i]
            key = chunk[bisect_right(chunk, low)]  # chunk[-1], its max, is above low
        return key if key <= high else None

    def between(self, low: Any | None, high: Any) -> Iterator[Any]:
        """The keys above *low* (None: from the first) and up to *high*, in order.

        The keys must not change while the iterator is in use.
        """
        chunks = self._chunks
        i, j = 0, 0
        if low is not None:
            i = bisect_right(self._maxes, low)
            if i < len(chunks):
                j = bisect_right(chunks[i], low)
        for chunk in chunks[i:]:
            for n in range(j, len(chunk)):
                key = chunk[n]
                if key > high:
                    return
                yield key
            j = 0

    def __iter__(self) -> Iterator[Any]:
        """Every key, in order."""
        for chunk in self._chunks:
            yield from chunk
