"""What of a job's events is private to its owner, pure (docs/security.md).

Eventlogs and the journal are public: every user may read them (``fluxes jobs``,
``job eventlog``, ``job wait`` on anyone's job). The text users write into them
is not: the note of an exception, the description of a dependency, and the
working directory and dependencies of the job summary that the journal's
``submit`` entry carries. :func:`split` takes those out of an event before it is
written; the writer stores them in the job owner's private hash (keyed by the
owner's uid, so Redis ACLs give it to the owner and the instance owner only),
one field per event (its eventlog position) and ``x`` for the summary, in the
same atomic step. The public event keeps every other field and holds, instead:

* an exception's note: :data:`PLACEHOLDER`;
* a dependency's description: :func:`masked`, a keyed digest of it (the
  ``dependency-remove`` of a ``dependency-add`` carries the same one, so the
  public fold still pairs them; the key is the instance's secret salt, so no
  one can test a guess of the text against it);
* the summary: no ``cwd`` and no ``dependencies``.

:func:`reveal` puts the text back for a reader who may read the private hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: What other users see instead of an exception's note.
PLACEHOLDER = "(private)"
#: The beginning of a masked dependency description.
MASK_PREFIX = "private:"
#: Fields of the job summary (the ``submit`` entry's journal extras) that are private.
PRIVATE_SUMMARY = ("cwd", "dependencies")
#: Private summary fields not kept in the private hash: the owner's jobspec (a blob only
#: its owner reads) holds them, and no reader wants them from the summary (a private hash
#: per pending job cost ~140 bytes of Redis for its cwd alone, fluxes bench memory).
#: A summary written before still holds them and reads as it is.
SUMMARY_DROPPED = ("cwd",)
#: The private hash's field holding the summary's private fields.
SUMMARY_FIELD = "x"


def masked(description: str, salt: bytes) -> str:
    """The public stand-in of a dependency description: a digest keyed by ``salt``."""
    import hashlib  # here: readers (fluxes jobs, fluxes run) never mask (start-up time)

    digest = hashlib.blake2b(description.encode("utf-8", "surrogatepass"),
                             key=salt[:64], digest_size=8).hexdigest()
    return f"{MASK_PREFIX}{digest}"


def split(name: str, context: Mapping[str, Any], salt: bytes
          ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The public context of event ``name`` (None: unchanged) and its private fields
    ({}: nothing private)."""
    if name == "exception":
        note = context.get("note")
        if isinstance(note, str) and note and note != PLACEHOLDER:
            return {**context, "note": PLACEHOLDER}, {"note": note,
                                                      "severity": context.get("severity")}
        return None, {}
    if name in ("dependency-add", "dependency-remove"):
        text = context.get("description")
        if isinstance(text, str) and not text.startswith(MASK_PREFIX):
            public = masked(text, salt)
            return {**context, "description": public}, {"description": text,
                                                         "public": public}
    return None, {}


def split_summary(extra: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The public job summary (None: unchanged) and its private fields to keep ({}: none;
    the :data:`SUMMARY_DROPPED` ones are left out of both)."""
    if not any(k in extra for k in PRIVATE_SUMMARY):
        return None, {}
    private = {k: extra[k] for k in PRIVATE_SUMMARY
               if k in extra and k not in SUMMARY_DROPPED}
    return {k: v for k, v in extra.items() if k not in PRIVATE_SUMMARY}, private


def reveal(context: Mapping[str, Any], private: Mapping[str, Any] | None
           ) -> dict[str, Any]:
    """``context`` with its private fields put back (as is without ``private``)."""
    out = dict(context)
    if not private:
        return out
    for key in ("note", "description"):
        if key in private:
            out[key] = private[key]
    return out


def fatal_note(private: Mapping[str, Any]) -> str | None:
    """The note of a job's first fatal (severity 0) exception among its private fields
    (eventlog position -> fields), which is the one its record keeps; None: none."""
    for _seq, fields in sorted(((int(k), v) for k, v in private.items() if k.isdigit()),
                               key=lambda kv: kv[0]):
        if isinstance(fields, Mapping) and fields.get("severity") == 0 \
                and isinstance(fields.get("note"), str):
            return str(fields["note"])
    return None


def originals(private: Mapping[str, Any]) -> dict[str, str]:
    """Masked dependency description -> the description, from a job's private fields."""
    return {v["public"]: v["description"] for v in private.values()
            if isinstance(v, Mapping) and isinstance(v.get("public"), str)
            and isinstance(v.get("description"), str)}
