"""Facts of a job read without redis-py (``fluxes run`` talks through the small client,
fluxes.store.lite, and must not import it): who owns it, whether it has an eventlog, its
events, and the entries of its streams (output) after a position.

Every event is stored once, in the partition journal. A job's eventlog key
(``{p}:job:<id>:eventlog``) is its index: a string of the journal ids of its
events, each followed by a space, appended by ``commit.lua`` with the events
(the journal keeps every entry of a job that still exists: it is trimmed only
past purged jobs, fluxes.store.retention). :func:`eventlog_entries` reads the
index, then those journal entries; an eventlog written before this layout (a
stream of the events themselves) is read as it is. :class:`EventlogFollower`
follows a job's new events on the journal.

The job hash's field names are those of fluxes/store/jobhash.py, its owner module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fluxes.store.keys import Keys

#: The job hash's owner field (fluxes.store.jobhash.OWNER).
OWNER_FIELD = "owner"
#: The job hash's field holding a short eventlog index (fluxes.store.jobhash.INDEX):
#: commit.lua keeps an index there while it is short (no key of its own: ~130 bytes
#: less a pending job), in the eventlog key once it grows (docs/eventlog.md).
INDEX_FIELD = "ev"


def index_reads(keys: Keys, jobid: int) -> list[tuple[Any, ...]]:
    """The two reads of a job's eventlog index (its own key, the job hash's field),
    whose replies :func:`index_of` makes one; both keys share a slot."""
    return [("GET", keys.eventlog(jobid)), ("HGET", keys.job(jobid), INDEX_FIELD)]


def index_of(key_reply: Any, field_reply: Any) -> Any:
    """A job's eventlog index from the replies of :func:`index_reads`: the key's
    (the index, a WRONGTYPE error for an eventlog of the stream layout) when it
    exists, else the hash field's (None: no eventlog)."""
    if key_reply is None and isinstance(field_reply, bytes):
        return field_reply
    return key_reply


def indexes_in(replies: list[Any]) -> list[Any]:
    """Each job's eventlog index (:func:`index_of`) from the replies of the
    :func:`index_reads` of several jobs, run in order."""
    return [index_of(k, f) for k, f in zip(replies[::2], replies[1::2], strict=True)]


def exists_reads(keys: Keys, jobid: int) -> list[tuple[Any, ...]]:
    """The two reads telling whether a job has an eventlog (:func:`exists_of`); HGET,
    not HEXISTS: what a user may send (fluxes.store.security.READ_COMMANDS)."""
    return [("EXISTS", keys.eventlog(jobid)), ("HGET", keys.job(jobid), INDEX_FIELD)]


def exists_of(key_reply: Any, field_reply: Any) -> bool:
    """Whether a job has an eventlog, from the replies of :func:`exists_reads`."""
    return (isinstance(key_reply, int) and key_reply > 0) or isinstance(field_reply, bytes)


def owner_of(client: Any, keys: Keys, jobid: int) -> int | None:
    """The uid that submitted the job; None when it has no hash (unknown or purged) or
    the field is not a number."""
    raw = client.hget(keys.job(jobid), OWNER_FIELD)
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


def has_eventlog(client: Any, keys: Keys, jobid: int) -> bool:
    """Whether the job's eventlog exists (it was submitted and not purged)."""
    return exists_of(*_run(client, exists_reads(keys, jobid)))


#: One raw stream entry: its id and fields (``n`` name, ``t`` time, ``c`` context).
Entry = tuple[bytes, dict[bytes, bytes]]


def _run(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Commands in one round trip; errors come back in place."""
    raw = getattr(client, "execute_raw", None)
    if raw is not None:  # the CLI's small client (fluxes.store.lite)
        answers: list[Any] = raw(commands)
        return answers
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(pipe.execute(raise_on_error=False))


def _wrong_type(reply: Any) -> bool:
    return isinstance(reply, Exception) and str(reply).startswith("WRONGTYPE")


def index_ids(raw: bytes) -> list[bytes]:
    """The journal ids of an eventlog index (a job's events, oldest first).

    The first id is whole; ``commit.lua`` writes the later ones relative to its
    time (``3-1`` for ``<first ms + 3>-1``), so a pending job's index is short. An
    index written before holds whole ids: a later id's time is never below the
    first's, so a time below it is relative."""
    tokens = raw.split()
    if len(tokens) < 2:
        return tokens
    first = tokens[0]
    base = int(first.partition(b"-")[0])
    out = [first]
    for token in tokens[1:]:
        ms, _, seq = token.partition(b"-")
        at = int(ms)
        out.append(token if at >= base else b"%d-%s" % (at + base, seq))
    return out


_EVENT_FIELDS = (b"n", b"t", b"c")


def _event_fields(fields: Any) -> dict[bytes, bytes]:
    """An entry's fields as a dict holding just the event's ``n``, ``t`` and ``c``."""
    pairs = fields if isinstance(fields, dict) else \
        dict(zip(fields[::2], fields[1::2], strict=False))
    # a field missing (a broken write) stays missing: the reader says which
    return {name: pairs[name] for name in _EVENT_FIELDS if name in pairs}


def _entries(reply: Any) -> list[Entry]:
    if isinstance(reply, Exception):
        raise reply
    return [(sid, _event_fields(fields)) for sid, fields in reply or []]


def entry_reads(keys: Keys, jobid: int, index: Any, count: int | None = None,
                newest: bool = False) -> tuple[list[tuple[Any, ...]], bool]:
    """The reads of one job's eventlog entries, given its index (as :func:`index_of`
    gives it; a WRONGTYPE error: an eventlog of the previous layout, its own stream),
    with ``count``, only its first (``newest``: last) ``count``; and whether that is
    one read of the whole stream (else one XRANGE of the journal per entry)."""
    if _wrong_type(index):
        key = keys.eventlog(jobid)
        extra = () if count is None else ("COUNT", count)
        return [("XREVRANGE", key, "+", "-", *extra) if newest
                else ("XRANGE", key, "-", "+", *extra)], True
    ids = index_ids(index) if index else []
    if count is not None:
        ids = ids[-count:] if newest else ids[:count]
    journal = keys.journal(keys.partition_of(jobid))
    return [("XRANGE", journal, sid, sid) for sid in ids], False


def indexes(client: Any, keys: Keys, jobids: list[int]) -> list[Any]:
    """Each job's eventlog index as :func:`index_of` gives it, in one round trip."""
    return indexes_in(_run(client, [read for j in jobids for read in index_reads(keys, j)]))


def eventlog_entries(client: Any, keys: Keys, jobids: list[int], count: int | None = None,
                     newest: bool = False) -> list[list[Entry] | None]:
    """Each job's eventlog entries as (stream id, fields ``n``, ``t``, ``c``), oldest
    first (None: no eventlog); with ``count``, only its first (``newest``: last)
    ``count``. Two round trips: the indexes, then the journal entries they name
    (the ids are journal ids); an eventlog of the previous layout (its own stream)
    is read directly."""
    if not jobids:
        return []
    heads = indexes(client, keys, jobids)
    commands: list[tuple[Any, ...]] = []
    plan: list[tuple[int, int] | None] = []  # per job: first command, how many
    for jobid, head in zip(jobids, heads, strict=True):
        if head is None:
            plan.append(None)
            continue
        if isinstance(head, Exception) and not _wrong_type(head):
            raise head
        reads, whole = entry_reads(keys, jobid, head, count, newest)
        plan.append((len(commands), -1 if whole else len(reads)))
        commands += reads
    replies = _run(client, commands) if commands else []
    out: list[list[Entry] | None] = []
    for step in plan:
        if step is None:
            out.append(None)
            continue
        first, n = step
        if n < 0:  # a stream of the previous layout
            entries = _entries(replies[first])
            out.append(entries[::-1] if newest else entries)
            continue
        # an entry gone from the journal (its job purged meanwhile) is left out
        out.append([e for reply in replies[first:first + n] for e in _entries(reply)])
    return out


def first_entry_read(keys: Keys, jobid: int, index: Any) -> tuple[str, tuple[Any, ...]]:
    """The read of a job's first event, given what GET answered for its eventlog
    (``index``): an anchor key and an XRANGE whose reply holds the entry (none when
    the job has no eventlog)."""
    log = keys.eventlog(jobid)
    if isinstance(index, bytes) and index.split():
        first = index.split(maxsplit=1)[0]
        journal = keys.journal(keys.partition_of(jobid))
        return journal, ("XRANGE", journal, first, first)
    # an eventlog of the previous layout (a stream: GET failed), or none (empty reply)
    return log, ("XRANGE", log, "-", "+", "COUNT", 1)


def id_key(stream_id: bytes | str) -> tuple[int, int]:
    """A stream id as a pair of numbers, for comparisons."""
    text = stream_id.decode() if isinstance(stream_id, bytes) else stream_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class EventlogFollower:
    """One job's eventlog, then each new event as it is committed: its ``history`` is
    read at construction; a reader XREADs :meth:`streams` (with its other streams,
    when they share a slot) and hands the entries of :attr:`key` to :meth:`take`.

    New events are followed on the partition journal, from the later of its last
    entry before the index was read and the job's last event: every event of the
    job committed before that point is in the index (commit.lua writes both in
    one step), and every later one comes after it. An eventlog of the previous
    layout (a stream of its own) is followed directly.
    """

    def __init__(self, client: Any, keys: Keys, jobid: int) -> None:
        self.jobid = jobid
        self._job = str(jobid).encode()
        journal = keys.journal(keys.partition_of(jobid))
        tip = client.xrevrange(journal, count=1)
        [history] = eventlog_entries(client, keys, [jobid])
        #: False when the job has no eventlog (unknown or purged)
        self.exists = history is not None
        #: the job's events so far
        self.history: list[Entry] = history or []
        last = self.history[-1][0] if self.history else b"0-0"
        # an eventlog of the previous layout is a stream of its own, followed as is
        [head] = _run(client, [("GET", keys.eventlog(jobid))])
        self._own = _wrong_type(head)
        #: the stream to read
        self.key = keys.eventlog(jobid) if self._own else journal
        best = last if self._own else max(tip[0][0] if tip else b"0-0", last, key=id_key)
        #: the last id read of :attr:`key`
        self.position = best.decode() if isinstance(best, bytes) else str(best)

    def streams(self) -> dict[str, str]:
        """What to XREAD: ``{key: position}``."""
        return {self.key: self.position}

    def take(self, entries: list[Any]) -> list[Entry]:
        """The job's events among ``entries`` (read from :attr:`key` after
        :attr:`position`, which moves past them all)."""
        out: list[Entry] = []
        for sid, fields in entries:
            self.position = sid.decode() if isinstance(sid, bytes) else str(sid)
            pairs = fields if isinstance(fields, dict) else \
                dict(zip(fields[::2], fields[1::2], strict=False))
            if self._own or (pairs.get(b"j") == self._job and b"s" in pairs):
                out.append((sid, _event_fields(pairs)))
        return out


def which_exist(client: Any, keys: Keys, jobids: list[int]) -> list[bool]:
    """For each of ``jobids``, whether it has an eventlog; one round trip."""
    if not jobids:
        return []
    found = _run(client, [read for j in jobids for read in exists_reads(keys, j)])
    return [exists_of(k, f) for k, f in zip(found[::2], found[1::2], strict=True)]


def read_new(client: Any, positions: dict[str, str], block: int | None = None,
             count: int = 1000) -> list[Any]:
    """The entries of the streams in ``positions`` (key -> last id seen) written after
    those ids, waiting up to ``block`` ms (0: for ever; None: not at all) for one; the
    reply as redis-py shapes XREAD's ([(stream, [(id, fields), ...]), ...])."""
    got: list[Any] = client.xread(positions, count=count, block=block) or []
    return got


def read_range(client: Any, key: str, start: str = "-", end: str = "+",
               count: int | None = None) -> list[tuple[Any, dict[Any, Any]]]:
    """A stream's entries from ``start`` to ``end`` (ids, inclusive), oldest first."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrange(key, min=start, max=end,
                                                              count=count)
    return entries


def read_last(client: Any, key: str, count: int = 1) -> list[tuple[Any, dict[Any, Any]]]:
    """A stream's newest ``count`` entries, newest first."""
    entries: list[tuple[Any, dict[Any, Any]]] = client.xrevrange(key, count=count)
    return entries


def last_events(client: Any, keys: Keys, jobids: list[int]
                ) -> list[tuple[Any, dict[Any, Any]] | None]:
    """Each job's newest eventlog entry (None: no eventlog)."""
    return [found[-1] if found else None
            for found in eventlog_entries(client, keys, jobids, count=1, newest=True)]


def eventlogs(client: Any, keys: Keys, jobids: list[int]
              ) -> list[list[tuple[Any, dict[Any, Any]]]]:
    """Each job's whole eventlog (empty: none)."""
    return [found or [] for found in eventlog_entries(client, keys, jobids)]


#: One read of a journal span serves a step's reads of single entries when the span
#: holds at most this many entries per wanted one (the ingest commits a request's
#: submits and validates together: the span of a step's new jobs holds little else).
SPAN_SLACK = 4


def entries_read(execute: Callable[[list[tuple[Any, ...]]], list[Any]],
                 commands: list[tuple[Any, ...]]) -> list[Any]:
    """The replies of ``commands`` as ``execute`` (a Direct's) gives them, the reads of
    single journal entries (``XRANGE journal id id``) of one journal answered from one read
    of the span they cover: one command, not one per entry (the job manager checks
    every new job's first events). An entry the span read did not bring (the span
    was longer than its bound, or the entry is gone) is read itself, as before."""
    singles: dict[Any, list[int]] = {}
    for n, command in enumerate(commands):
        if command[0] == "XRANGE" and len(command) == 4 and command[2] == command[3]:
            singles.setdefault(command[1], []).append(n)
    spans = {key: positions for key, positions in singles.items() if len(positions) > 1}
    if not spans:
        return execute(commands)
    spanned = {n for positions in spans.values() for n in positions}
    rest = [n for n in range(len(commands)) if n not in spanned]
    span_reads = []
    try:
        for key, positions in spans.items():
            ids = sorted((_id_text(commands[n][2]) for n in positions), key=id_key)
            span_reads.append(("XRANGE", key, ids[0], ids[-1],
                               "COUNT", SPAN_SLACK * len(positions)))
    except ValueError:
        return execute(commands)  # an index naming no id: Redis says what is wrong
    got = execute([commands[n] for n in rest] + span_reads)
    out: list[Any] = [None] * len(commands)
    for n, reply in zip(rest, got[:len(rest)], strict=True):
        out[n] = reply
    missing: list[int] = []
    for positions, reply in zip(spans.values(), got[len(rest):], strict=True):
        found = {} if isinstance(reply, Exception) else \
            {_id_text(entry[0]): entry for entry in reply}
        for n in positions:
            entry = found.get(_id_text(commands[n][2]))
            if entry is None:
                missing.append(n)
            else:
                out[n] = [entry]
    if missing:
        for n, reply in zip(missing, execute([commands[n] for n in missing]),
                            strict=True):
            out[n] = reply
    return out


def _id_text(value: Any) -> str:
    """A stream id as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
