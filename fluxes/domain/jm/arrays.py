"""Job arrays: one submit request standing for a copy of one job per id (``submit --cc``).

A request ``{"t": "submit", "jobs": [ITEM], "cc": IDSET}`` costs the same few
bytes whatever its size: the ingest expands it one job at a time while it
checks them, so neither the client, nor the stream, nor the ingest ever holds
a list of its copies (issue 26: one ``--cc=1-200000`` grew the ingest to 4 GB
when every copy travelled whole). ``{cc}`` in the jobspec becomes each copy's
id, as ``flux submit --cc`` does, and copies keep the order of the id set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import orjson

from fluxes.domain.jm import content
from fluxes.formats.idset import IDSet
from fluxes.messages.types import SubmitItem, SubmitJobs

#: The longest ``cc`` id set string a request may carry.
MAX_CC_TEXT = 4096


def array_ids(request: SubmitJobs) -> IDSet | None:
    """The ids of an array request (None for a plain one); ValueError with a one-line
    reason when its ``cc`` cannot be an array (bad id set, not exactly one job)."""
    if request.cc is None:
        return None
    if len(request.cc) > MAX_CC_TEXT:
        raise ValueError(f"cc: an id set of {len(request.cc)} characters, at most "
                         f"{MAX_CC_TEXT}")
    if len(request.jobs) != 1:
        raise ValueError(f"cc: an array request holds exactly one job, not "
                         f"{len(request.jobs)}")
    try:
        ids = IDSet(request.cc)
    except ValueError as exc:
        raise ValueError(f"cc: {exc}") from None
    if not ids:
        raise ValueError("cc: the id set is empty")
    return ids


def job_count(request: SubmitJobs) -> int:
    """How many jobs ``request`` stands for (a malformed array: its one item)."""
    try:
        ids = array_ids(request)
    except ValueError:
        return len(request.jobs)
    return len(request.jobs) if ids is None else len(ids)


#: The variable ``submit --cc`` sets in each copy's environment (flux: FLUX_JOB_CC).
CC_VARIABLE = content.CC_VARIABLE


def with_cc_variable(doc: dict[str, Any], cc: int) -> dict[str, Any]:
    """``doc`` (a jobspec) with ``FLUXES_JOB_CC=cc`` in its environment (copies of the
    dicts on the way only: the copies share everything else)."""
    attributes = dict(doc.get("attributes") or {})
    system = dict(attributes.get("system") or {})
    environment = dict(system.get("environment") or {})
    environment[CC_VARIABLE] = str(cc)
    system["environment"] = environment
    attributes["system"] = system
    return {**doc, "attributes": attributes}


def copies(item: SubmitItem, ids: IDSet, cc_var: bool = False) -> Iterator[SubmitItem]:
    """One item per id, ``{cc}`` in its jobspec (or YAML) replaced by the id; made one
    at a time. Without ``{cc}`` every copy is ``item`` itself. With ``cc_var`` (``--cc``)
    each copy's jobspec also gets ``FLUXES_JOB_CC=<id>`` (YAML text is left as it is)."""
    if cc_var and item.jobspec is not None:
        text = orjson.dumps(item.jobspec).decode()
        for i in ids:
            doc = orjson.loads(text.replace("{cc}", str(i))) if "{cc}" in text \
                else item.jobspec
            yield msgspec.structs.replace(item, jobspec=with_cc_variable(doc, i))
        return
    if item.jobspec is not None:
        text = orjson.dumps(item.jobspec).decode()
        if "{cc}" not in text:
            yield from (item for _ in ids)
            return
        for i in ids:
            yield msgspec.structs.replace(item, jobspec=orjson.loads(
                text.replace("{cc}", str(i))))
        return
    if item.yaml is None or "{cc}" not in item.yaml:
        yield from (item for _ in ids)
        return
    for i in ids:
        yield msgspec.structs.replace(item, yaml=item.yaml.replace("{cc}", str(i)))
