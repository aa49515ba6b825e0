"""The write half of the job-manager worker: a step's effects committed.

The effects :class:`~fluxes.domain.jm.core.JobManagerCore` decided in a step are
written in one fenced commit (:mod:`fluxes.store.jm_unit` lays them out); in the
pipelined loop they go out with the next read of the inputs, in one round trip,
and any other write (careful mode, a new session, a checkpoint, the clean stop)
sends them first, so that every eventlog grows in order. A commit refused as
stale steps down; one refused otherwise gives memory up (rebuilt from storage)
or, for an input committed alone, refuses that input.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fluxes.domain.jm.core import JobManagerCore
from fluxes.domain.jm.effects import Effects
from fluxes.messages.bounds import one_line
from fluxes.proc import hops, metrics
from fluxes.store.eventstore import BadBatchError, ConflictError, FencedError, KeyTypeError
from fluxes.store.jm_unit import JobManagerStore, Unit
from workers.base import Worker, per_stream

#: Stream entries per read (a new-job entry may carry a couple of thousand jobs).
READ_COUNT = 200


class Committing(Worker):
    """The job manager's writes (mixed into :class:`workers.jobmanager.JobManagerWorker`,
    which sets the attributes below and defines the methods declared here)."""

    partition: int
    inputs: list[str]
    writes: JobManagerStore
    core: JobManagerCore | None
    token: str | None
    salt: bytes
    pipelined: bool
    checkpoint_every: int
    events_written: int
    _unsent: Effects | None
    _sent_exec: list[float]
    _sent_alloc: list[float]
    _since_checkpoint: int
    _last_journal_id: str
    _careful: bool
    _alone: tuple[str, bytes, Mapping[bytes, bytes]] | None

    def step_down(self, why: str) -> None:
        """Forget everything held in memory (defined by the worker)."""
        raise NotImplementedError

    def poisoned(self, stream: str, msg_id: bytes, fields: Mapping[bytes, bytes],
                 exc: Exception) -> None:
        """Refuse an input whose handling or commit failed (defined by the worker)."""
        raise NotImplementedError

    def _renewed_token(self) -> str | None:
        raise NotImplementedError

    def _layout(self, fx: Effects) -> Unit:
        core = self.core
        epoch = fx.sched_epoch or (core.session.epoch if core and core.session.epoch else 0)
        return self.writes.layout(fx, epoch, self.salt, per_stream(fx.dead_letters))

    def commit(self, fx: Effects) -> None:
        """Write ``fx`` (after the step's effects not sent yet); on a stale token step
        down, on a conflict rebuild from storage."""
        self.flush()
        if not fx or self.token is None:
            return
        unit = self._layout(fx)
        if unit.dead_letters_apart:
            # Several partitions: the dead letters cannot share the commit's
            # slot, so they go first; a crash before the commit writes them
            # again when the inputs are read again, and never loses one.
            self.write_dead_letters(fx.dead_letters)
        try:
            result = self.writes.commit(unit.batches[0], self.token)
            written = result.events
            for batch in unit.batches[1:]:
                token = self._renewed_token()
                if token is None:
                    return
                result = self.writes.commit(batch, token)
                written += result.events
        except FencedError as exc:
            self.step_down(str(exc))
            return
        except (ConflictError, KeyTypeError, BadBatchError) as exc:
            self.commit_refused(exc)
            return
        for error in self.writes.write_later(unit.later):
            self.log.warning("reply not written", extra={"error": error})
        self._committed(fx, written, result.journal_id)

    def flush(self) -> None:
        """Commit the last step's effects if they still wait for the next read (none
        once memory was given up: their inputs are read again)."""
        fx, self._unsent = self._unsent, None
        if fx is not None and self.core is not None:
            self.commit(fx)

    def _committed(self, fx: Effects, written: int, journal_id: str,
                   sent: float | None = None) -> None:
        """Count what a commit wrote; end the hand-offs it completes (when it was sent,
        or now); checkpoint if due."""
        if fx.dead_letters:
            self.count_dead_letters(len(fx.dead_letters))
        if self._sent_exec or self._sent_alloc:
            now = time.time() if sent is None else sent
            hops.record_since(hops.EXEC_TO_JM, self._sent_exec, now)
            hops.record_since(hops.SCHED_TO_JM, self._sent_alloc, now)
            self._sent_exec, self._sent_alloc = [], []
        if written:
            if metrics.served_port() is not None:  # nobody reads the counter otherwise
                metrics.EVENTS_JOB_MANAGER.inc(written)
            self.events_written += written
            self._since_checkpoint += written
            self._last_journal_id = journal_id
            if self._since_checkpoint >= self.checkpoint_every:
                self.checkpoint()

    def _read(self, streams: dict[str, str], block: int | None) -> list[Any]:
        """The next block of inputs; the last step's effects, when they wait, go out in
        the same write (one round trip). [] when that commit was refused or stale."""
        fx, self._unsent = self._unsent, None
        unit = self._layout(fx) if fx and self.token is not None else None
        if fx is None or unit is None or not self.writes.can_read_with(unit, self.inputs):
            if fx is not None:
                self._unsent = fx
                self.flush()
                if self.core is None:
                    return []
            return self.writes.read(streams, READ_COUNT, block, "jm")
        assert self.token is not None
        # the hand-offs end when the commit is sent: Redis runs it at once
        sent = time.time()
        try:
            got = self.writes.commit_then_read(unit.batches[0], self.token, streams,
                                               READ_COUNT, block, "jm")
        except FencedError as exc:
            self.step_down(str(exc))
            return []
        except (ConflictError, KeyTypeError, BadBatchError) as exc:
            self.commit_refused(exc)
            return []
        self._committed(fx, got.result.events, got.result.journal_id, sent)
        if got.error is not None:
            raise got.error
        return got.entries

    def commit_refused(self, exc: Exception) -> None:
        """A commit that storage refused (not as stale): memory and storage disagree.

        Alone in its commit (careful mode), the input is the cause: it is
        refused. Otherwise memory is given up; the next step rebuilds it from
        storage and then takes the pending inputs one per commit.
        """
        alone, self._alone = self._alone, None
        if alone is not None:
            self.poisoned(*alone, exc)
            return
        self.log.error("commit refused, rebuilding", extra={"error": one_line(str(exc))})
        self._careful = True
        self.core = None

    def checkpoint(self) -> None:
        """Write the active records and the journal position they include (fenced)."""
        self.flush()
        core = self.core
        if core is None or self.token is None:
            return
        try:
            self.writes.checkpoint((a.rec for a in core.jobs.values()),
                                   self._last_journal_id, self.token)
        except FencedError as exc:
            self.step_down(str(exc))
            return
        self._since_checkpoint = 0
