"""Progress records of submit requests, so a redelivered request resumes instead of redoing.

The ingest may write one request's jobs in several commits (a big request is
cut into batches, and with several partitions each partition commits on its
own). Each commit that creates jobs of a request also appends, in the same
atomic step, which of the request's jobs it created: their indices in the
request and their ids. If the ingest dies before the request is acknowledged,
the request is delivered again; the records then say which jobs already exist,
and only the others are created.

Every request is recorded, even one done in a single commit, and records
are kept a day: a client that sends the same request again (same user, same
request id) after a timeout gets the same jobs, never new ones. A record
therefore also names the request it belongs to (a digest of it), so that a
request id used again for another request is told apart and refused.

A record is JSON: ``{"request": digest, "runs": runs}`` (records written
before digests are the bare list of runs), where each run ``[index, id,
count, step]`` means that job ``index + k*step`` of the request got id
``id + k*step`` for ``0 <= k < count``. Bulk submissions get consecutive
FLUIDs, and a partition takes every ``partitions``-th of them, so a batch is
usually one run. A control request (cancel, urgency, raise) is recorded with
no runs once it is forwarded, so it is not forwarded twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from fluxes.formats.jobid import MAX_ID

Pair = tuple[int, int]


class ReusedRequestId(ValueError):
    """The records under a request id belong to another request than the one at hand."""


def encode(pairs: Sequence[Pair], digest: str | None = None) -> bytes:
    """The record of ``pairs`` (job index, job id), given in increasing index order, for
    the request whose digest is ``digest``."""
    runs: list[list[int]] = []
    i = 0
    while i < len(pairs):
        index, jobid = pairs[i]
        count, step = 1, 1
        if i + 1 < len(pairs):
            d_index = pairs[i + 1][0] - index
            if d_index > 0 and pairs[i + 1][1] - jobid == d_index:
                step = d_index
                while (i + count < len(pairs)
                       and pairs[i + count][0] == index + count * step
                       and pairs[i + count][1] == jobid + count * step):
                    count += 1
        runs.append([index, jobid, count, step])
        i += count
    return orjson.dumps({"request": digest, "runs": runs} if digest is not None else runs)


def decode(blob: bytes, njobs: int, digest: str | None = None) -> dict[int, int]:
    """Job index -> id from one record of a request of ``njobs`` jobs (whose digest is
    ``digest``, when known).

    Raises ReusedRequestId when the record names another request, ValueError
    when it is not well formed or names a job the request does not have.
    """
    try:
        runs: Any = orjson.loads(blob)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"progress record is not JSON: {exc}") from None
    if isinstance(runs, dict):
        recorded = runs.get("request")
        if digest is not None and isinstance(recorded, str) and recorded != digest:
            raise ReusedRequestId("the request id was used for another request")
        runs = runs.get("runs")
    if not isinstance(runs, list):
        raise ValueError("progress record must be a list of runs")
    out: dict[int, int] = {}
    for run in runs:
        if (not isinstance(run, list) or len(run) != 4
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in run)):
            raise ValueError(f"progress run must be 4 integers, got {run!r:.60}")
        index, jobid, count, step = run
        if count < 1 or step < 1:
            raise ValueError(f"progress run {run!r:.60}: count and step must be >= 1")
        last_index = index + (count - 1) * step
        if index < 0 or last_index >= njobs:
            raise ValueError(f"progress run {run!r:.60}: the request has {njobs} jobs")
        if jobid < 0 or jobid + (count - 1) * step > MAX_ID:
            raise ValueError(f"progress run {run!r:.60}: job id out of range")
        for k in range(count):
            out[index + k * step] = jobid + k * step
    return out


def merge(blobs: Iterable[bytes], njobs: int, digest: str | None = None) -> dict[int, int]:
    """Job index -> id from every record of a request (all partitions, all commits).

    Raises ReusedRequestId when a record names another request than ``digest``,
    ValueError for a malformed record, or when two records give one job
    different ids (records of two different requests under one name).
    """
    out: dict[int, int] = {}
    blobs = list(blobs)
    for blob in blobs:  # another request's records: say so before anything else
        decode_digest_only(blob, digest)
    for blob in blobs:
        for index, jobid in decode(blob, njobs, digest).items():
            if out.setdefault(index, jobid) != jobid:
                raise ValueError(f"progress records disagree on job {index} of the request")
    return out


def decode_digest_only(blob: bytes, digest: str | None) -> None:
    """ReusedRequestId when the record ``blob`` names another request than ``digest``
    (anything else about it is :func:`decode`'s business)."""
    if digest is None:
        return
    try:
        doc: Any = orjson.loads(blob)
    except orjson.JSONDecodeError:
        return
    if isinstance(doc, dict) and isinstance(doc.get("request"), str) \
            and doc["request"] != digest:
        raise ReusedRequestId("the request id was used for another request")
