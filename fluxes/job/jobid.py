"""``JobID``: a job id that is an int and knows its encodings (flux's ``flux.job.JobID``)."""

from __future__ import annotations

from typing import Any

from fluxes.formats import jobid as _ids


class JobID(int):
    """A job id: an ``int`` built from an int or any encoding's text (dec, hex,
    dothex, kvs, F58, words), with ``.dec``, ``.hex``, ``.dothex``, ``.kvs``,
    ``.f58``, ``.f58plain`` and ``.words``; ``str()`` is F58 as flux prints it.
    Raises ``ValueError`` for text that is no job id (as flux does)."""

    orig: str

    def __new__(cls, value: Any) -> JobID:
        """A JobID from an int or the text of any encoding."""
        if isinstance(value, JobID):
            return value
        if isinstance(value, bytes):
            value = value.decode()
        if isinstance(value, str):
            parsed = _ids.parse(value)
            orig = value
        elif isinstance(value, int) and not isinstance(value, bool):
            parsed = int(value)
            orig = str(value)
        else:
            raise TypeError(f"a job id is an int or text, not {type(value).__name__}")
        _ids.encode(parsed)  # refuses ids outside 0 .. 2**64-1
        self = super().__new__(cls, parsed)
        self.orig = orig
        return self

    def encode(self, encoding: str = "dec") -> str:
        """The id in ``encoding`` (dec, hex, dothex, kvs, f58, f58plain, words)."""
        return _ids.encode(int(self), encoding)

    @property
    def dec(self) -> str:
        """Decimal."""
        return str(int(self))

    @property
    def hex(self) -> str:
        """Hexadecimal with 0x."""
        return self.encode("hex")

    @property
    def dothex(self) -> str:
        """Four dot-separated 16-bit hex groups."""
        return self.encode("dothex")

    @property
    def kvs(self) -> str:
        """flux's KVS directory name (``job.`` + dothex)."""
        return self.encode("kvs")

    @property
    def f58(self) -> str:
        """FLUID base58 with the ``ƒ`` prefix."""
        return self.encode("f58")

    @property
    def f58plain(self) -> str:
        """FLUID base58 with an ASCII ``f``."""
        return self.encode("f58plain")

    @property
    def words(self) -> str:
        """The mnemonic words form."""
        return self.encode("words")

    def __str__(self) -> str:
        return self.f58

    def __repr__(self) -> str:
        return f"JobID({int(self)})"


def id_parse(text: str) -> JobID:
    """``text`` (any encoding) as a JobID (flux's ``flux.job.id_parse``)."""
    return JobID(text)


def id_encode(jobid: int, encoding: str = "f58") -> str:
    """``jobid`` in ``encoding`` (flux's ``flux.job.id_encode``)."""
    return _ids.encode(int(jobid), encoding)
