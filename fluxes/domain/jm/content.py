"""A job's jobspec as content-addressed blobs, pure: split, digest, splice.

Most of a jobspec is the submitter's environment, the same in every job of
a ``--cc`` array or a workflow's thousands of jobs. As flux's content store
keeps blobs by their hash, the ingest stores a jobspec as two blobs, each
once per distinct content: the environment (``attributes.system.environment``)
and the rest of the jobspec. The job hash names them by digest
(:mod:`fluxes.store.jobhash`); the blob keys carry the owner, so jobs of two
users never share one.

The rest of a jobspec is written with ``attributes`` first and ``system``
first in it (:data:`PREFIX`), so putting the environment back is a
concatenation (:func:`splice`), in Python or in Lua, with no parsing: the
result is the same JSON object (keys in another order) as submitted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

#: How every split jobspec begins: the environment goes right after it.
PREFIX: Final = b'{"attributes":{"system":{'
_ENV_KEY: Final = b'"environment":'


def json_bytes(obj: Any) -> bytes:
    """``obj`` as compact JSON in a bytes object of its own size.

    orjson returns its write buffer, which keeps the capacity it grew to: a
    2 KB jobspec held that way costs ~8 KB of resident memory, and the ingest
    holds every jobspec of a block of up to 10,000 jobs (issue 26: 27 KB per
    job checked, 7.6 KB with the copy). The copy costs ~1 us per KB.
    """
    return bytes(memoryview(orjson.dumps(obj)))


def digest(data: bytes) -> str:
    """The content address of ``data``: 128 bits of BLAKE2b, in hex.

    Blobs are per owner, so a collision could only mix up one user's own jobs.
    """
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Blob:
    """Bytes and their digest."""

    digest: str
    data: bytes

    @classmethod
    def of(cls, data: bytes) -> Blob:
        """The blob holding ``data``."""
        return cls(digest(data), data)


def _environment(doc: Any) -> Mapping[str, Any] | None:
    """The jobspec's non-empty environment object, or None (nothing to split off)."""
    if not isinstance(doc, dict):
        return None
    attributes = doc.get("attributes")
    system = attributes.get("system") if isinstance(attributes, dict) else None
    env = system.get("environment") if isinstance(system, dict) else None
    return env if isinstance(env, dict) and env else None


def split(jobspec: bytes) -> tuple[bytes, bytes | None]:
    """``jobspec`` (JSON) without its environment, and the environment (JSON).

    The first part begins with :data:`PREFIX` whenever an environment was
    split off; a jobspec without one (or an empty one) comes back as it is,
    with None. ValueError if ``jobspec`` is not JSON.
    """
    try:
        doc = orjson.loads(jobspec)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"jobspec is not JSON: {exc}") from None
    env = _environment(doc)
    if env is None:
        return jobspec, None
    attributes = doc["attributes"]
    system = {k: v for k, v in attributes["system"].items() if k != "environment"}
    rest = {"attributes": {"system": system,
                           **{k: v for k, v in attributes.items() if k != "system"}},
            **{k: v for k, v in doc.items() if k != "attributes"}}
    return json_bytes(rest), json_bytes(env)


#: The variable ``submit --cc`` sets in each copy's environment: the one thing in which
#: the environments of an array's jobs differ (:mod:`fluxes.domain.jm.arrays`).
CC_VARIABLE: Final = "FLUXES_JOB_CC"
_CC_KEY: Final = b'"' + CC_VARIABLE.encode() + b'":'


def split_cc(env: bytes | None) -> tuple[bytes | None, str | None]:
    """An environment (JSON) without its ``FLUXES_JOB_CC`` and that variable's value, so
    that the copies of a ``--cc`` array share one environment blob (issue 26: a blob of
    ~2 KB per job otherwise); ``env`` as it is when it has no such variable (a string)
    or nothing else."""
    if env is None or _CC_KEY not in env:
        return env, None
    doc = orjson.loads(env)
    cc = doc.pop(CC_VARIABLE, None)
    if not isinstance(cc, str) or not doc:
        return env, None
    return json_bytes(doc), cc


def with_cc(env: bytes, cc: str | None) -> bytes:
    """``env`` (a non-empty JSON object) with ``FLUXES_JOB_CC`` set to ``cc`` again (as
    :func:`split_cc` took it out; None: as it is)."""
    if cc is None:
        return env
    return b"".join((b"{", _CC_KEY, orjson.dumps(cc), b",", env[1:]))


def splice(spec: bytes, env: bytes | None, cc: str | None = None) -> bytes:
    """The whole jobspec from :func:`split`'s parts (``spec`` as is without ``env``), with
    the ``FLUXES_JOB_CC`` :func:`split_cc` took out of the environment.

    ValueError when ``spec`` is not a split jobspec.
    """
    if env is None:
        return spec
    env = with_cc(env, cc)
    if not spec.startswith(PREFIX):
        raise ValueError("stored jobspec is not in split form")
    rest = spec[len(PREFIX):]
    return b"".join((PREFIX, _ENV_KEY, env, b"" if rest[:1] == b"}" else b",", rest))


@dataclass(frozen=True, slots=True)
class JobContent:
    """A job's jobspecs as blobs: ``spec`` as submitted, ``full`` with the instance's
    defaults applied (only when they changed it), both without ``env``, the
    environment they share (None when there is none to split off)."""

    spec: Blob
    full: Blob | None = None
    env: Blob | None = None
    #: ``FLUXES_JOB_CC``, taken out of ``env`` (:func:`split_cc`)
    cc: str | None = None

    @property
    def blobs(self) -> tuple[Blob, ...]:
        """Every blob the job references."""
        return tuple(b for b in (self.spec, self.full, self.env) if b is not None)

    def jobspec(self) -> bytes:
        """The jobspec as submitted."""
        return splice(self.spec.data, self.env.data if self.env else None, self.cc)

    def jobspec_full(self) -> bytes | None:
        """The jobspec with defaults applied, when it differs from the submitted one."""
        if self.full is None:
            return None
        return splice(self.full.data, self.env.data if self.env else None, self.cc)


def job_content(jobspec: bytes, jobspec_full: bytes | None = None) -> JobContent:
    """The blobs of a job's jobspecs (JSON). Should the defaults have changed the
    environment, both are kept whole (no environment blob)."""
    spec, env = split(jobspec)
    full = None
    if jobspec_full is not None:
        full, full_env = split(jobspec_full)
        if full_env != env:
            return JobContent(Blob.of(jobspec), Blob.of(jobspec_full))
    env, cc = split_cc(env)
    return JobContent(Blob.of(spec), None if full is None else Blob.of(full),
                      None if env is None else Blob.of(env), cc)
