"""Equal immutable values shared: one object where many records hold the same value.

The jobs of one submission carry equal stamps, user ids and accounting records; in
the workers that hold every pending job (the job manager, the job list, the
accounting fold) one object per distinct value saves its bytes on every job
(issue 26). A table is a bounded cache: clearing it only costs sharing.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class SharedValues(Generic[T]):
    """At most ``kept`` distinct values, each given back for any equal one."""

    __slots__ = ("_kept", "_values")

    def __init__(self, kept: int) -> None:
        """A table of at most ``kept`` values (cleared when full)."""
        self._kept = kept
        self._values: dict[T, T] = {}

    def __call__(self, value: T) -> T:
        """``value``, or the equal value seen before."""
        found = self._values.get(value)
        if found is None:
            if len(self._values) >= self._kept:
                self._values.clear()
            found = self._values[value] = value
        return found

    def __len__(self) -> int:
        return len(self._values)
