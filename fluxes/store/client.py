"""The client side of user requests: submit, cancel, urgency, raise.

A request is one XADD to the user's own submit stream; the answer arrives on
a reply list the client waits on with BLPOP (a blocking read with a timeout,
no polling). Bulk submissions are split into chunks that are all sent in one
pipeline before the first reply is awaited, so thousands of jobs cost a few
round trips.
"""

from __future__ import annotations

import os
import pwd
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from fluxes.errors import FluxesError
from fluxes.store.instance import Instance

#: Jobs per submit request when submitting in bulk.
CHUNK = 1000
DEFAULT_TIMEOUT = 60.0


class RequestTimeout(FluxesError):
    """No answer arrived in time (is the instance running its ingest and job manager?)."""


def current_user() -> str:
    """The name of the user running this process."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _submission_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` as the ingest reads it: a Jobspec becomes its document and lends
    its urgency when the item names none; a None urgency is left out, so that
    the instance's default applies."""
    from fluxes.formats.jobspec import Jobspec  # not at import: it loads yaml and jsonschema

    out = dict(item)
    spec = out.get("jobspec")
    if isinstance(spec, Jobspec):
        out["jobspec"] = spec.to_dict()
        if out.get("urgency") is None:
            out["urgency"] = spec.urgency
    if "urgency" in out and out["urgency"] is None:
        del out["urgency"]
    return out


class Client:
    """Sends requests to an instance as one user."""

    def __init__(self, instance: Instance, user: str | None = None) -> None:
        self.instance = instance
        self.redis = instance.redis
        self.keys = instance.keys
        # The user's submit stream: a credentials file's user (its Redis ACL
        # lets it write only that stream) before the UNIX user name.
        self.user = user or instance.user or current_user()

    def _send(self, requests: Sequence[dict[str, Any]]) -> list[str]:
        """XADD the requests in one pipeline; return their reply keys."""
        pipe = self.redis.pipeline(transaction=False)
        reply_keys = []
        stream = self.keys.submit(self.user)
        for request in requests:
            req = uuid.uuid4().hex
            reply_keys.append(self.keys.reply(self.user, req))
            pipe.xadd(stream, {"d": orjson.dumps({**request, "req": req})})
        pipe.execute()
        return reply_keys

    def _wait(self, reply_key: str, timeout: float, count: int = 1) -> list[dict[str, Any]]:
        answers = []
        for _ in range(count):
            got = self.redis.blpop([reply_key], timeout=max(timeout, 0.01))
            if got is None:
                raise RequestTimeout(
                    f"no answer within {timeout:g}s (is the instance's ingest running?)")
            answer = orjson.loads(got[1])
            if not isinstance(answer, dict):
                raise FluxesError("malformed answer from the instance")
            answers.append(answer)
        return answers

    def submit(self, items: Sequence[Mapping[str, Any]], timeout: float = DEFAULT_TIMEOUT,
               progress: Callable[[int], None] | None = None) -> list[int | str]:
        """Submit jobs (``{"jobspec": ..., "urgency": ..., "flags": ...}`` each).

        ``jobspec`` is a document or a :class:`~fluxes.formats.jobspec.Jobspec`.  An
        item whose ``urgency`` is missing or None takes the Jobspec's own
        :attr:`~fluxes.formats.jobspec.Jobspec.urgency`; with neither, the instance
        applies its default (16).  Returns, in order, each job's id or the
        one-line reason it was refused.
        """
        items = [_submission_item(item) for item in items]
        chunks = [list(items[i:i + CHUNK]) for i in range(0, len(items), CHUNK)]
        reply_keys = self._send([{"t": "submit", "jobs": chunk} for chunk in chunks])
        out: list[int | str] = []
        for chunk, key in zip(chunks, reply_keys, strict=True):
            answer = self._wait(key, timeout)[0]
            if "jobs" not in answer:
                errors = answer.get("errors") or ["submission refused"]
                out.extend([str(errors[0])] * len(chunk))
            else:
                for result in answer["jobs"]:
                    out.append(int(result["id"]) if "id" in result else str(result["error"]))
            if progress is not None:
                progress(len(out))
        return out

    def _control(self, request: dict[str, Any], ids: Sequence[int],
                 timeout: float) -> dict[str, Any]:
        parts = {self.keys.partition_of(j) for j in ids} or {0}
        key = self._send([request])[0]
        merged: dict[str, Any] = {"ok": [], "errors": []}
        for answer in self._wait(key, timeout, count=len(parts)):
            merged["ok"] += answer.get("ok", []) if isinstance(answer.get("ok"), list) else []
            merged["errors"] += answer.get("errors", [])
            for k, v in answer.items():
                if k not in ("ok", "errors"):
                    merged[k] = v
        return merged

    def cancel(self, ids: Sequence[int], note: str = "",
               timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Cancel jobs; returns ``{"ok": [ids], "errors": [lines]}``."""
        return self._control({"t": "cancel", "ids": list(ids), "note": note}, ids, timeout)

    def raise_exception(self, ids: Sequence[int], etype: str, severity: int = 0,
                        note: str = "", timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Raise an exception on jobs (``flux job raise``)."""
        return self._control({"t": "raise", "ids": list(ids), "type": etype,
                              "severity": severity, "note": note}, ids, timeout)

    def urgency(self, jobid: int, urgency: int,
                timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Change a job's urgency; the answer has ``old`` on success."""
        return self._control({"t": "urgency", "id": jobid, "urgency": urgency}, [jobid],
                             timeout)
