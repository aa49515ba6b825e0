"""PMI-1 "simple" wire protocol: the server side of one job's share on one execution rank.

MPICH (and programs built on it) find their peers through a process-management
interface: each task gets a connected socket (``PMI_FD``), its rank and the job
size in its environment, and speaks a line protocol, one request then one
answer (``cmd=init``, ``get_maxes``, ``get_appnum``, ``get_my_kvsname``,
``get_universe_size``, ``put``, ``get``, ``barrier_in``, ``finalize``,
``abort``; Flux RFC 13 documents it).  The key-value store (KVS) and its
barrier span the whole job: a rank's tasks enter a barrier round, and when all
of them have, the rank hands its puts of the round to the exchange (between
nodes: Redis, :mod:`fluxes.store.pmi_kvs`); once every rank has, every task
gets ``barrier_out`` and may read what any task put before it.

:class:`PmiShare` is that server for the tasks of one rank, pure: the process
side (:mod:`fluxes.proc.pmi_server`) feeds it the bytes each task sends and
carries out what it asks for: the answers to send (:attr:`PmiShare.out`), a
barrier round to hand to the exchange (:meth:`PmiShare.take_round`), the KVS
to fetch before ``get`` can be answered (:attr:`PmiShare.want_fetch`), and a
failure that ends the job (:attr:`PmiShare.failure`: ``MPI_Abort``, a
protocol error, a task that exited before ``PMI_Finalize`` while its job
uses PMI).  A job on one rank only exchanges nothing: its barrier completes
here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: Limits the server announces (``get_maxes``); MPICH splits longer values itself.
KVSNAME_MAX = 256
KEYLEN_MAX = 256
VALLEN_MAX = 1024
#: Longest request line accepted (a put of the longest key and value, and the rest).
LINE_MAX = 4096
#: Most bytes of puts one rank may hold for its job (keys and values): the exchange
#: goes through Redis, and a runaway task must not fill it.
KVS_BYTES_MAX = 64 << 20

#: Task connection states.
NEW, ACTIVE, FINALIZED, CLOSED = "new", "active", "finalized", "closed"

#: Shell option values of ``pmi`` (flux's names): the simple wire protocol, or none.
PMI_MODES = ("simple", "off")


def pmi_mode(option: object) -> str:
    """The PMI mode of a job from its ``pmi`` shell option (default ``simple``).

    Flux takes a comma-separated list of PMI implementations; fluxes offers
    ``simple`` (the wire protocol) and ``off``; ValueError (the job's exec
    error) for anything else.
    """
    if option is None:
        return "simple"
    if not isinstance(option, str):
        raise ValueError("shell option pmi must be a string (simple or off)")
    names = [name.strip() for name in option.split(",") if name.strip()]
    if "simple" in names or not names:
        return "simple"
    if names in (["off"], ["none"]):
        return "off"
    raise ValueError(f"shell option pmi={option!r}: fluxes offers simple or off")


#: Fields whose value is the rest of the request line.
_REST_OF_LINE = frozenset(("value", "message", "msg"))


def encode(**fields: object) -> bytes:
    """One answer line: ``cmd=...`` first, then the fields in the given order."""
    return (" ".join(f"{k}={v}" for k, v in fields.items()) + "\n").encode()


def parse_line(line: bytes) -> dict[str, str]:
    """The ``key=value`` fields of one request line; ValueError when it is not one.

    ``value=`` (and an abort's ``message=``/``msg=``) takes the rest of the
    line (RFC 13 lets them hold spaces); other fields are separated by
    blanks, in any order.
    """
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("PMI request is not ASCII") from None
    fields: dict[str, str] = {}
    rest = text.strip()
    while rest:
        token, _sep, tail = rest.partition(" ")
        name, eq, value = token.partition("=")
        if not eq or not name:
            raise ValueError(f"PMI request field {token[:40]!r} is not key=value")
        if name in _REST_OF_LINE:
            value = rest[len(name) + 1:]
            tail = ""
        fields[name] = value
        rest = tail.lstrip()
    if "cmd" not in fields and "mcmd" not in fields:
        raise ValueError("PMI request without cmd=")
    return fields


@dataclass
class TaskConn:
    """What the server knows of one task's connection."""

    rank: int
    state: str = NEW
    buf: bytes = b""
    in_spawn: bool = False  # reading a multi-line spawn request until ``endcmd``


@dataclass
class PmiShare:
    """The PMI server of one job's tasks on one execution rank (see the module).

    ``size`` is the job's task count, ``nnodes`` its rank count and
    ``node_rank`` this rank's index among them; ``tasks`` the task ranks
    served here; ``mapping`` the ``PMI_process_mapping`` value ("" unknown);
    ``kvsname`` the name every task of the job is told.
    """

    jobid: int
    size: int
    nnodes: int
    node_rank: int
    tasks: Sequence[int]
    mapping: str = ""
    kvsname: str = ""
    conns: dict[int, TaskConn] = field(default_factory=dict)
    out: list[tuple[int, bytes]] = field(default_factory=list)
    kvs: dict[str, str] = field(default_factory=dict)  # what the exchange made visible
    pending: dict[str, str] = field(default_factory=dict)  # local puts since the last round
    kvs_bytes: int = 0
    round: int = 0  # barrier rounds completed
    entered: set[int] = field(default_factory=set)  # tasks in the current round
    submitted: bool = False  # the current round was handed to the exchange
    want_fetch: bool = False  # the exchange's KVS is newer than ``kvs``: fetch before a get
    waiting_gets: list[tuple[int, str]] = field(default_factory=list)
    failure: str | None = None
    used: bool = False  # some task initialized: the job speaks PMI
    unfinished: list[int] = field(default_factory=list)  # tasks gone before PMI_Finalize

    def __post_init__(self) -> None:
        if not self.kvsname:
            self.kvsname = f"kvs_{self.jobid}"
        for rank in self.tasks:
            self.conns[rank] = TaskConn(rank)

    # ----------------------------------------------------------------- input

    def feed(self, rank: int, data: bytes) -> None:
        """Bytes task ``rank`` sent (b"": its end of the socket closed)."""
        conn = self.conns[rank]
        if conn.state == CLOSED:
            return
        if not data:
            self._closed(conn)
            return
        conn.buf += data
        while b"\n" in conn.buf:
            line, conn.buf = conn.buf.split(b"\n", 1)
            self._line(conn, line)
            if conn.state == CLOSED:
                return
        if len(conn.buf) > LINE_MAX:
            self._protocol_error(conn, "request line too long")

    def _closed(self, conn: TaskConn) -> None:
        was = conn.state
        conn.state = CLOSED
        if was != FINALIZED:
            self.unfinished.append(conn.rank)
            self._check_unfinished()

    def _check_unfinished(self) -> None:
        """A task gone before PMI_Finalize while the job uses PMI: its peers would wait
        for it forever in the next barrier."""
        if self.used and self.unfinished and self.failure is None:
            self.failure = f"PMI: task {self.unfinished[0]} exited before PMI_Finalize"

    def _protocol_error(self, conn: TaskConn, why: str) -> None:
        conn.state = CLOSED
        if self.failure is None:
            self.failure = f"PMI: task {conn.rank}: protocol error: {why}"

    def _line(self, conn: TaskConn, line: bytes) -> None:
        if conn.in_spawn:
            if line.strip() == b"endcmd":
                conn.in_spawn = False
                self._send(conn, cmd="spawn_result", rc=-1)
            return
        if len(line) > LINE_MAX:
            self._protocol_error(conn, "request line too long")
            return
        try:
            fields = parse_line(line)
        except ValueError as exc:
            self._protocol_error(conn, str(exc))
            return
        if "mcmd" in fields:
            conn.in_spawn = fields["mcmd"] == "spawn"
            if not conn.in_spawn:
                self._protocol_error(conn, f"unknown mcmd={fields['mcmd'][:40]}")
            return
        cmd = fields["cmd"]
        if conn.state == NEW and cmd != "init":
            self._protocol_error(conn, f"cmd={cmd[:40]} before cmd=init")
            return
        handler = _HANDLERS.get(cmd)
        if handler is None:
            self._protocol_error(conn, f"unknown cmd={cmd[:40]}")
            return
        handler(self, conn, fields)

    def _send(self, conn: TaskConn, **fields: object) -> None:
        self.out.append((conn.rank, encode(**fields)))

    # ----------------------------------------------------------------- commands

    def _init(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        # version 1.1 whatever the client offers (RFC 13: the server says which)
        conn.state = ACTIVE
        self.used = True
        self._send(conn, cmd="response_to_init", pmi_version=1, pmi_subversion=1, rc=0)
        self._check_unfinished()

    def _maxes(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        self._send(conn, cmd="maxes", rc=0, kvsname_max=KVSNAME_MAX, keylen_max=KEYLEN_MAX,
                   vallen_max=VALLEN_MAX)

    def _appnum(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        self._send(conn, cmd="appnum", rc=0, appnum=0)

    def _kvsname(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        self._send(conn, cmd="my_kvsname", rc=0, kvsname=self.kvsname)

    def _universe(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        self._send(conn, cmd="universe_size", rc=0, size=self.size)

    def _put(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        key, value = fields.get("key", ""), fields.get("value", "")
        if not key or len(key) >= KEYLEN_MAX or len(value) >= VALLEN_MAX:
            self._send(conn, cmd="put_result", rc=-1, msg="invalid_key_or_value")
            return
        if key.startswith("PMI_"):
            self._send(conn, cmd="put_result", rc=-1, msg="reserved_key")
            return
        self.kvs_bytes += len(key) + len(value)
        if self.kvs_bytes > KVS_BYTES_MAX:
            self._send(conn, cmd="put_result", rc=-1, msg="kvs_full")
            return
        self.pending[key] = value
        self._send(conn, cmd="put_result", rc=0, msg="success")

    def _get(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        key = fields.get("key", "")
        if self.want_fetch:
            self.waiting_gets.append((conn.rank, key))
            return
        self._answer_get(conn, key)

    def _answer_get(self, conn: TaskConn, key: str) -> None:
        if key == "PMI_process_mapping":
            self._send(conn, cmd="get_result", rc=0, msg="success", value=self.mapping)
            return
        value = self.kvs.get(key)
        if value is None:
            value = self.pending.get(key)
        if value is None and key.startswith("PMI_"):
            value = ""  # RFC 13: a reserved key that is not there reads as empty
        if value is None:
            self._send(conn, cmd="get_result", rc=-1, msg=f"key_{key}_not_found")
        else:
            self._send(conn, cmd="get_result", rc=0, msg="success", value=value)

    def _barrier(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        self.entered.add(conn.rank)
        if self.nnodes == 1 and self.local_round_ready():
            # the whole job is here: nothing to exchange
            self.kvs.update(self.pending)
            self.pending = {}
            self.complete(self.round + 1)

    def _finalize(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        conn.state = FINALIZED
        self._send(conn, cmd="finalize_ack", rc=0)

    def _abort(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        # no answer: the client exits (or is killed with the job)
        code = fields.get("exitcode", "")
        message = fields.get("message") or fields.get("msg") or ""
        if self.failure is None:
            text = f"task {conn.rank}" + (f" exit code {code}" if code else "")
            self.failure = "PMI_Abort: " + (f"{message} ({text})" if message else text)

    def _unsupported(self, conn: TaskConn, fields: Mapping[str, str]) -> None:
        # name publishing and the iteration of old clients: not offered (as flux)
        answer = {"publish_name": "publish_result", "unpublish_name": "unpublish_result",
                  "lookup_name": "lookup_result", "getbyidx": "getbyidx_results"}
        self._send(conn, cmd=answer[fields["cmd"]], rc=-1, msg="not_supported")

    # ----------------------------------------------------------------- barrier

    def local_round_ready(self) -> bool:
        """Every task served here (not gone) is in the current barrier round."""
        live = [r for r, c in self.conns.items() if c.state != CLOSED]
        return bool(live) and all(r in self.entered for r in live) and not self.submitted

    def take_round(self) -> tuple[int, dict[str, str]] | None:
        """The round to hand to the exchange (its number and this rank's puts), once
        every local task entered it; None otherwise (or already handed over)."""
        if self.nnodes == 1 or self.failure is not None or not self.local_round_ready():
            return None
        self.submitted = True
        puts, self.pending = self.pending, {}
        self.kvs.update(puts)  # our own puts are visible to us at once
        return self.round + 1, puts

    def untake(self, round_: int, puts: Mapping[str, str]) -> None:
        """Handing round ``round_`` over failed (Redis unreachable): take it again later."""
        if round_ == self.round + 1 and self.submitted:
            self.submitted = False
            self.pending = {**puts, **self.pending}

    def complete(self, round_: int) -> None:
        """Barrier round ``round_`` is complete on every rank: release the tasks in it.
        A round other than the current one (a repeated wake-up) changes nothing."""
        if round_ != self.round + 1 or not self.entered:
            return
        self.round = round_
        self.submitted = False
        if self.nnodes > 1:
            self.want_fetch = True  # other ranks' puts: read them before the next get
        for rank in sorted(self.entered):
            conn = self.conns[rank]
            if conn.state != CLOSED:
                self._send(conn, cmd="barrier_out", rc=0)
        self.entered = set()

    def loaded(self, kvs: Mapping[str, str]) -> None:
        """The exchange's KVS, fetched: answer the gets that waited for it."""
        self.kvs.update(kvs)
        self.want_fetch = False
        waiting, self.waiting_gets = self.waiting_gets, []
        for rank, key in waiting:
            conn = self.conns[rank]
            if conn.state != CLOSED:
                self._answer_get(conn, key)

    def broken(self, reason: str) -> None:
        """The exchange says the job cannot go on (a rank left before finalizing)."""
        if self.failure is None:
            self.failure = reason

    def clean(self) -> bool:
        """Every task served here finalized (or none used PMI at all and none is left)."""
        return all(c.state == FINALIZED or (c.state == CLOSED and c.rank not in
                                            self.unfinished) for c in self.conns.values())

    def drain(self) -> list[tuple[int, bytes]]:
        """The answers to send now (and forget them)."""
        out, self.out = self.out, []
        return out


_HANDLERS = {
    "init": PmiShare._init,
    "get_maxes": PmiShare._maxes,
    "get_appnum": PmiShare._appnum,
    "get_my_kvsname": PmiShare._kvsname,
    "get_universe_size": PmiShare._universe,
    "put": PmiShare._put,
    "get": PmiShare._get,
    "barrier_in": PmiShare._barrier,
    "finalize": PmiShare._finalize,
    "abort": PmiShare._abort,
    "publish_name": PmiShare._unsupported,
    "unpublish_name": PmiShare._unsupported,
    "lookup_name": PmiShare._unsupported,
    "getbyidx": PmiShare._unsupported,
}


def pmi_environment(rank: int, size: int, local_id: int, local_size: int,
                    fd: int) -> dict[str, str]:
    """What a task needs to find its PMI server: the wire protocol's ``PMI_FD``,
    ``PMI_RANK``, ``PMI_SIZE``, and the local rank facts Hydra also gives
    (``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``)."""
    return {"PMI_FD": str(fd), "PMI_RANK": str(rank), "PMI_SIZE": str(size),
            "MPI_LOCALRANKID": str(local_id), "MPI_LOCALNRANKS": str(local_size)}


#: Variables of a PMI the submitting environment may carry (a job submitted from inside
#: another job's task): never handed on, since their descriptors mean nothing here.
STALE_VARIABLES = ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_SPAWNED", "PMI_PORT", "PMI_ID",
                   "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def without_stale(env: Mapping[str, str], names: Iterable[str] = STALE_VARIABLES
                  ) -> dict[str, str]:
    """``env`` without :data:`STALE_VARIABLES`."""
    drop = set(names)
    return {k: v for k, v in env.items() if k not in drop}
