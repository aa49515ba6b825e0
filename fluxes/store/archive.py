"""The journal archive: trimmed journal entries kept in one gzip file per UTC day.

Layout: ``<dir>/<namespace>/p<partition>/journal-YYYY-MM-DD.jsonl.gz``, one
JSON line per entry, ``[id, [field, value, ...]]`` (values as UTF-8 text, as
the journal holds them), in journal order. Each archiving run appends one gzip
member (a gzip file may hold several; readers read them all).

What is archived is recorded in the partition's retention hash
(``{p}:retention``): ``archived`` (the id of the last entry archived),
``archive_file`` and ``archive_len`` (the file being appended to and its length
after the last recorded append). The record is written only after the file is
fsynced, and the journal is trimmed only up to ``archived``, so an entry leaves
Redis only once it is on disk. A run that dies after writing but before
recording leaves bytes past ``archive_len`` (or a whole unrecorded file of a
later day): the next run cuts them off before appending, and writes those
entries again, which the journal still holds. So the archive never holds an
entry twice or a torn member, whatever the crash.

gzip from the standard library, not zstandard: archiving runs a few times a
minute, so its speed does not matter, and gzip needs no new dependency to lock
and audit (``fluxes bench retention`` prints the archive's bytes per job).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
import redis

from fluxes.domain.retention import parse_id, split_by_day
from fluxes.errors import FluxesError
from fluxes.store.keys import Keys

#: A raw journal entry: its id and its flat field list, as ``XRANGE`` returns it raw.
RawEntry = tuple[bytes, list[bytes]]
#: Entries per block a reader yields.
READ_BLOCK = 10_000
_NAME = re.compile(r"^journal-(\d{4}-\d{2}-\d{2})\.jsonl\.gz$")


class ArchiveError(FluxesError):
    """The archive does not hold what Redis says it does (a file lost or cut short)."""


class JournalArchive:
    """One partition's archive directory: append trimmed entries, read them back."""

    def __init__(self, root: str | os.PathLike[str], keys: Keys, partition: int) -> None:
        self.root = Path(root)
        self.keys = keys
        self.partition = partition
        self.dir = self.root / keys.ns / f"p{partition}"

    def path(self, day: str) -> Path:
        """The file of ``day`` (``YYYY-MM-DD``)."""
        return self.dir / f"journal-{day}.jsonl.gz"

    def files(self) -> list[Path]:
        """The day files present, oldest day first."""
        try:
            names = sorted(p.name for p in self.dir.iterdir() if _NAME.match(p.name))
        except OSError:
            return []  # none here, or not ours to read: another user's state directory
        return [self.dir / name for name in names]

    # ------------------------------------------------------------ writing

    def append(self, client: redis.Redis, entries: Sequence[RawEntry]) -> str | None:
        """Append ``entries`` (in journal order, all after what is archived) and record
        them in the retention hash; the id of the last one (None: nothing to do).

        Raises ArchiveError, having recorded nothing, when the file the record
        names is shorter than recorded (lost or cut by something else): trimming
        must then stop until an operator looks.
        """
        if not entries:
            return None
        record_key = self.keys.retention(self.partition)
        raw = client.hmget(record_key, ["archive_file", "archive_len"])
        current = raw[0].decode() if raw[0] else None
        length = int(raw[1]) if raw[1] else 0
        self.dir.mkdir(parents=True, exist_ok=True)
        ids = [sid.decode() for sid, _fields in entries]
        last = None
        for day, start, end in split_by_day(ids):
            path = self.path(day)
            keep = length if current == path.name else 0
            if current is not None and current != path.name and path.name < current:
                raise ArchiveError(f"{path}: entries of {day} come after the archive's "
                                   f"current file {current}")
            size = self._prepare(path, keep)
            data = b"".join(orjson.dumps([sid.decode(), [_text(v) for v in fields]]) + b"\n"
                            for sid, fields in entries[start:end])
            with open(path, "ab") as out:
                out.write(gzip.compress(data, mtime=0))
                out.flush()
                os.fsync(out.fileno())
            if size == 0:
                _fsync_dir(self.dir)
            length = path.stat().st_size
            current = path.name
            last = ids[end - 1]
            client.hset(record_key, mapping={"archived": last, "archive_file": current,
                                             "archive_len": length})
        return last

    @staticmethod
    def _prepare(path: Path, keep: int) -> int:
        """Cut ``path`` back to ``keep`` bytes (what the record says is good); its size."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            if keep:
                raise ArchiveError(f"{path} is missing, though {keep} bytes of it were "
                                   "recorded: is the archive directory shared by every "
                                   "job-list worker?") from None
            return 0
        if size < keep:
            raise ArchiveError(f"{path} holds {size} bytes, {keep} were recorded")
        if size > keep:
            with open(path, "r+b") as out:
                out.truncate(keep)
                os.fsync(out.fileno())
        return keep

    # ------------------------------------------------------------ reading

    def holds(self, stream_id: str) -> bool:
        """True when the archive reaches ``stream_id``: its newest file ends at or after
        it (False when this host has no archive files: another host's directory)."""
        files = self.files()
        if not files:
            return False
        last = None
        for line in _lines(files[-1]):
            last = line
        if last is None:
            return False
        try:
            return parse_id(orjson.loads(last)[0]) >= parse_id(stream_id)
        except (orjson.JSONDecodeError, ValueError, TypeError, IndexError):
            return False

    def read(self, after: str = "0-0", until: str | None = None,
             block: int = READ_BLOCK) -> Iterator[list[RawEntry]]:
        """Archived entries with ids after ``after`` (and at most ``until``), in order, in
        blocks. A member cut short at the end of a file (a run that died while
        writing, before its record) is passed over, as is anything out of order."""
        low = parse_id(after)
        high = parse_id(until) if until is not None else None
        out: list[RawEntry] = []
        for path in self.files():
            for line in _lines(path):
                try:
                    sid, fields = orjson.loads(line)
                    key = parse_id(sid)
                except (orjson.JSONDecodeError, ValueError, TypeError):
                    continue
                if key <= low:
                    continue
                if high is not None and key > high:
                    if out:
                        yield out
                    return
                low = key
                out.append((sid.encode(), [str(v).encode() for v in fields]))
                if len(out) >= block:
                    yield out
                    out = []
        if out:
            yield out


def _lines(path: Path) -> Iterator[bytes]:
    """The lines of every complete gzip member of ``path``."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    while data:
        inflate = zlib.decompressobj(wbits=31)
        try:
            text = inflate.decompress(data)
        except zlib.error:
            return
        if not inflate.eof:
            return  # a member cut short: written by a run that died before recording it
        yield from text.splitlines()
        data = inflate.unused_data


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _fsync_dir(path: Path) -> None:
    """Make a new file's directory entry durable too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
