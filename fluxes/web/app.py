"""The ``fluxes web`` application (Starlette): pages, JSON endpoints, live events, actions.

Stateless like every worker: what a server keeps in memory (the time index,
connections) is a cache, and a session is a signed cookie that any server of
the instance reads, so several servers can stand behind a load balancer.

Every page has a JSON twin under ``/api`` (docs/web.md lists them). Reads of
the present go through the session's own Redis identity (a guest's through
the server's, and never to private data); actions (drain, queue admin,
cancel) go through the same paths as the CLI, with the session's identity,
so Redis' ACLs and the ingest decide what is allowed. Every form carries the
session's CSRF token.

Why one module: the route table (:func:`create_app`) and the thin handlers it names
belong together; the data is in :mod:`fluxes.web.data`, the HTML in
:mod:`fluxes.web.render`, login in :mod:`fluxes.web.auth`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib import resources as pkg_resources
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from fluxes.errors import FluxesError
from fluxes.formats import jobid as jobids
from fluxes.store.errors import (
    AuthenticationError,
    NoPermissionError,
    StoreConnectionError,
    StoreError,
    StoreTimeoutError,
)
from fluxes.store.instance import Instance
from fluxes.web import data, render
from fluxes.web.auth import (
    COOKIE,
    FLASH_COOKIE,
    Identities,
    LoginError,
    Session,
    Sessions,
    csrf_ok,
    new_session,
)
from fluxes.web.timefold import SNAPSHOT_EVERY, entry_name, job_and_stamp
from fluxes.web.timeindex import IndexNotReady, TimeIndex

log = logging.getLogger("fluxes.web")

#: Largest form body accepted.
MAX_FORM_BYTES = 64 * 1024
#: How long the follower's read of the journals blocks (ms).
FOLLOW_BLOCK_MS = 500
#: Events a slow live client may fall behind by before some are dropped (it reloads
#: the view anyway).
QUEUE_SIZE = 1000
#: A comment line keeps a quiet event stream open through proxies.
KEEPALIVE_S = 15.0
#: How long a cancel from the page waits for the ingest's answer.
CANCEL_TIMEOUT_S = 10.0


class Live:
    """The follower thread: folds new journal entries into the time index and hands
    them to every open event stream."""

    def __init__(self, index: TimeIndex, freeze: bool = False) -> None:
        self.index = index
        #: after the first build, freeze what exists out of the cycle collector's sight
        #: (a server process: the index is a large, long-lived state)
        self.freeze = freeze
        self.stopping = threading.Event()
        self._subs: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        #: entries handed on so far (tests wait on it)
        self.seen = 0

    def start(self) -> None:
        """Start following (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="fluxes-web-follower",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop following (within a blocking read)."""
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                if not self.index.ready.is_set():
                    self.index.build()
                    log.info("time index built", extra={"seconds": round(self.index.build_s, 3)})
                    if self.freeze:
                        from fluxes.proc.gcpolicy import freeze

                        freeze()
                got = self.index.follow(FOLLOW_BLOCK_MS)
            except (StoreError, OSError, FluxesError, ValueError) as exc:
                log.warning("following the journal failed, retrying",
                            extra={"error": str(exc)[:200]})
                self.stopping.wait(1.0)
                continue
            except Exception:
                # a bug must not end live updates for good: say it, and carry on
                log.exception("the journal follower failed, retrying")
                self.stopping.wait(1.0)
                continue
            for _partition, (_sid, fields) in got:
                found = job_and_stamp(fields)
                if found is None:
                    continue
                jobid, stamp = found
                self.publish({"id": jobid, "f58": jobids.encode(jobid, "f58"),
                              "name": entry_name(fields).decode("utf-8", "replace"),
                              "t": stamp})

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        """A queue of the events to come, for the calling event loop."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        with self._lock:
            self._subs[id(queue)] = (asyncio.get_running_loop(), queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        """Stop handing events to ``queue``."""
        with self._lock:
            self._subs.pop(id(queue), None)

    def publish(self, item: dict[str, Any]) -> None:
        """Hand ``item`` to every subscriber (dropped for one whose queue is full)."""
        self.seen += 1
        with self._lock:
            subs = list(self._subs.values())
        for loop, queue in subs:
            with contextlib.suppress(RuntimeError):  # its loop is closed
                loop.call_soon_threadsafe(_offer, queue, item)


def _offer(queue: asyncio.Queue[dict[str, Any]], item: dict[str, Any]) -> None:
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(item)


@dataclass
class Web:
    """Everything the endpoints share."""

    server: Instance
    sessions: Sessions
    identities: Identities
    index: TimeIndex
    live: Live
    #: cookies only over HTTPS (behind a TLS-terminating proxy)
    secure_cookies: bool = False
    started: float = field(default_factory=time.time)


# ---------------------------------------------------------------- plumbing


@dataclass
class Call:
    """One request as the endpoints see it."""

    web: Web
    request: Request
    session: Session
    #: set when the response must carry a new session cookie
    new_cookie: bool = False
    flash: tuple[str, bool] | None = None
    clear_flash: bool = False

    def view(self) -> data.View:
        """The data view of this request: the session's identity, the moment asked for."""
        at = data.parse_at(self.request.query_params.get("at"))
        inst = self.web.identities.instance(self.session)
        return data.View(inst, self.web.server, self.web.index, self.session, at)

    def frame(self, view: data.View | None = None) -> render.Frame:
        """The page frame: who looks, when, the time bar."""
        index = self.web.index
        first = last = None
        if index.ready.is_set():
            first, last = index.span()
        return render.Frame(
            path=self.request.url.path, query=dict(self.request.query_params),
            user=self.session.user, owner=self.session.owner, csrf=self.session.csrf,
            at=view.at if view is not None else None, first=first, last=last,
            purged_before=index.purged_before if index.ready.is_set() else None,
            flash=self.flash)


def _session_of(web: Web, request: Request) -> tuple[Session, bool]:
    found = web.sessions.load(request.cookies.get(COOKIE))
    return (found, False) if found is not None else (new_session(), True)


def _finish(call: Call, response: Response) -> Response:
    if call.new_cookie:
        response.set_cookie(COOKIE, call.web.sessions.dump(call.session),
                            max_age=call.web.sessions.max_age, httponly=True, samesite="lax",
                            secure=call.web.secure_cookies, path="/")
    if call.clear_flash:
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def _json(doc: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS), status_code=status,
                    media_type="application/json")


def _failure(call: Call, status: int, message: str, api: bool) -> Response:
    if api:
        return _json({"error": message}, status)
    return HTMLResponse(render.error(call.frame(), status, message), status_code=status)


def _guarded(call: Call, handler: Callable[[Call], Response], api: bool) -> Response:
    """Run ``handler``, turning what goes wrong into a status and a one-line message."""
    try:
        return handler(call)
    except (LoginError, AuthenticationError) as exc:
        # the password stopped working (renewed, user deleted): back to guest
        call.web.identities.forget(call.session)
        call.session = new_session()
        call.new_cookie = True
        return _failure(call, 401, f"your login no longer works ({exc}): log in again", api)
    except data.NotFound as exc:
        return _failure(call, 404, str(exc), api)
    except IndexNotReady as exc:
        return _failure(call, 503, str(exc), api)
    except NoPermissionError:
        return _failure(call, 403, "not allowed with your credentials", api)
    except (StoreConnectionError, StoreTimeoutError) as exc:
        # Redis closes a deleted user's connections: the next request logs in afresh
        call.web.identities.forget(call.session)
        return _failure(call, 503, f"the instance does not answer: {str(exc)[:120]}", api)
    except (ValueError, FluxesError) as exc:
        return _failure(call, 400, str(exc).splitlines()[0] if str(exc) else "bad request",
                        api)


def _get(handler: Callable[[Call], Response], api: bool = False
         ) -> Callable[[Request], Response]:
    def endpoint(request: Request) -> Response:
        web: Web = request.app.state.web
        session, fresh = _session_of(web, request)
        call = Call(web, request, session, new_cookie=fresh)
        flash = request.cookies.get(FLASH_COOKIE)
        if flash is not None and not api:
            call.flash = web.sessions.load_flash(flash)
            call.clear_flash = True
        return _finish(call, _guarded(call, handler, api))

    endpoint.__name__ = handler.__name__
    return endpoint


def _post(handler: Callable[[Call, dict[str, str]], Response]
          ) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        web: Web = request.app.state.web
        session, fresh = _session_of(web, request)
        call = Call(web, request, session, new_cookie=fresh)
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return _finish(call, _failure(call, 413, "form too large", False))
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        token = form.get("csrf") or request.headers.get("x-csrf-token")
        if fresh or not csrf_ok(session, token):
            # a form from another site, or from a page older than the session
            return _finish(call, _failure(call, 403, "the form has expired or did not come "
                                          "from this site: reload the page and try again",
                                          False))
        return await run_in_threadpool(
            lambda: _finish(call, _guarded(call, lambda c: handler(c, form), False)))

    endpoint.__name__ = handler.__name__
    return endpoint


def _back(call: Call, default: str = "/") -> str:
    """Where an action returns to: the page it came from, when it is one of ours."""
    referer = call.request.headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        if parts.netloc == call.request.url.netloc and parts.path.startswith("/"):
            return parts.path + (f"?{parts.query}" if parts.query else "")
    return default


def _redirect(call: Call, to: str, message: str | None = None, error: bool = False
              ) -> Response:
    response = RedirectResponse(to, status_code=303)
    if message is not None:
        response.set_cookie(FLASH_COOKIE, call.web.sessions.dump_flash(message, error),
                            max_age=120, httponly=True, samesite="lax", path="/",
                            secure=call.web.secure_cookies)
    return response


def _flag(call: Call, name: str) -> bool:
    return call.request.query_params.get(name, "") not in ("", "0", "false", "no")


def _limit(call: Call) -> int:
    text = call.request.query_params.get("limit", "")
    try:
        return int(text) if text else data.DEFAULT_LIMIT
    except ValueError:
        raise ValueError(f"limit must be a number, got {text[:20]!r}") from None


def _opt(call: Call, name: str) -> str | None:
    value = call.request.query_params.get(name)
    return value if value not in (None, "") else None


# ---------------------------------------------------------------- reads


def _jobs_doc(call: Call, view: data.View) -> dict[str, Any]:
    queue = call.request.query_params.get("queue")
    return data.jobs(view, all_jobs=_flag(call, "all"), user=_opt(call, "user"),
                     queue=queue if queue not in (None, "") else None,
                     states=_opt(call, "states"), limit=_limit(call),
                     forecast=_flag(call, "forecast"))


def page_machine(call: Call) -> Response:
    """``/``: the machine."""
    view = call.view()
    return HTMLResponse(render.machine(call.frame(view), data.resources(view),
                                       data.queues(view)))


def page_queues(call: Call) -> Response:
    """``/queues``."""
    view = call.view()
    return HTMLResponse(render.queues(call.frame(view), data.queues(view)))


def page_jobs(call: Call) -> Response:
    """``/jobs``."""
    view = call.view()
    doc = _jobs_doc(call, view)
    names = list(view.inst.config().queues.queue_names)
    return HTMLResponse(render.jobs(call.frame(view), doc, names))


def page_job(call: Call) -> Response:
    """``/jobs/ID``."""
    view = call.view()
    jobid = data.parse_job(call.request.path_params["job"])
    doc = data.job(view, jobid)
    row = doc.get("job") or {}
    active = bool(row) and not row.get("result")
    mine = call.session.owner or (call.session.uid is not None
                                  and call.session.uid == doc.get("owner"))
    can_cancel = active and view.at is None and not call.session.guest and mine
    return HTMLResponse(render.job(call.frame(view), doc, can_cancel))


def _window(call: Call) -> tuple[float | None, float | None]:
    return (data.parse_at(call.request.query_params.get("start")),
            data.parse_at(call.request.query_params.get("end")))


def page_gantt(call: Call) -> Response:
    """``/gantt``."""
    view = call.view()
    start, end = _window(call)
    return HTMLResponse(render.gantt(call.frame(view), data.gantt(
        view, start, end, forecast=_flag(call, "forecast"))))


def page_usage(call: Call) -> Response:
    """``/usage``."""
    view = call.view()
    since = data.parse_at(call.request.query_params.get("since"))
    return HTMLResponse(render.usage(call.frame(view), data.usage(view, since)))


def page_login(call: Call) -> Response:
    """``/login``: the form."""
    next_path = call.request.query_params.get("next", "/")
    return HTMLResponse(render.login(call.frame(), _local(next_path)))


def api_jobs(call: Call) -> Response:
    """``/api/jobs``."""
    return _json(_jobs_doc(call, call.view()))


def api_job(call: Call) -> Response:
    """``/api/jobs/ID``."""
    return _json(data.job(call.view(), data.parse_job(call.request.path_params["job"])))


def api_resources(call: Call) -> Response:
    """``/api/resources``."""
    return _json(data.resources(call.view()))


def api_queues(call: Call) -> Response:
    """``/api/queues``."""
    return _json(data.queues(call.view()))


def api_gantt(call: Call) -> Response:
    """``/api/gantt``."""
    start, end = _window(call)
    return _json(data.gantt(call.view(), start, end, forecast=_flag(call, "forecast")))


def api_usage(call: Call) -> Response:
    """``/api/usage``."""
    since = data.parse_at(call.request.query_params.get("since"))
    until = data.parse_at(call.request.query_params.get("until"))
    return _json(data.usage(call.view(), since, until))


def api_timeline(call: Call) -> Response:
    """``/api/timeline``."""
    return _json(data.timeline(call.view()))


def api_steps(call: Call) -> Response:
    """``/api/steps``."""
    text = call.request.query_params.get("n", "1")
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"n must be a number, got {text[:20]!r}") from None
    return _json(data.steps(call.view(), count, backwards=_flag(call, "back")))


def api_whoami(call: Call) -> Response:
    """``/api/whoami``: the session's user (null: a guest) and whether it is the owner."""
    return _json({"user": call.session.user, "owner": call.session.owner,
                  "uid": call.session.uid, "csrf": call.session.csrf})


async def api_events(request: Request) -> Response:
    """``/api/events``: server-sent events, one per journal entry (``job`` filters by
    job id): ``event: job``, data ``{"id", "f58", "name", "t"}``."""
    web: Web = request.app.state.web
    only: int | None = None
    text = request.query_params.get("job")
    if text:
        try:
            only = data.parse_job(text)
        except data.NotFound as exc:
            return _json({"error": str(exc)}, 404)
    queue = web.live.subscribe()

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield b"retry: 2000\n: connected\n\n"
            quiet = 0.0
            while not web.live.stopping.is_set():
                try:
                    item = await asyncio.wait_for(queue.get(), 1.0)
                except TimeoutError:
                    quiet += 1.0
                    if quiet >= KEEPALIVE_S:
                        quiet = 0.0
                        yield b": keepalive\n\n"
                    continue
                if only is not None and item["id"] != only:
                    continue
                yield b"event: job\ndata: " + orjson.dumps(item) + b"\n\n"
        finally:
            web.live.unsubscribe(queue)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# ---------------------------------------------------------------- actions


def _local(path: str) -> str:
    """``path`` if it is a path of this site (never another site: an open redirect)."""
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def act_login(call: Call, form: dict[str, str]) -> Response:
    """``POST /login``."""
    next_path = _local(form.get("next", "/"))
    try:
        session = call.web.identities.login(form.get("user", ""), form.get("password", ""),
                                            call.session)
    except LoginError as exc:
        return HTMLResponse(render.login(call.frame(), next_path, str(exc)), status_code=401)
    call.session = session
    call.new_cookie = True
    return _redirect(call, next_path, f"logged in as {session.user}")


def act_logout(call: Call, form: dict[str, str]) -> Response:
    """``POST /logout``."""
    call.web.identities.forget(call.session)
    call.session = new_session()
    call.new_cookie = True
    return _redirect(call, "/", "logged out")


def _need_login(call: Call, what: str) -> Response | None:
    if call.session.guest:
        return _redirect(call, "/login?next=" + _back(call), f"log in to {what}", error=True)
    return None


def act_drain(call: Call, form: dict[str, str]) -> Response:
    """``POST /actions/drain`` and ``/actions/undrain``: a resource event, as ``fluxes
    resource drain|undrain`` writes it (the instance owner's Redis access needed)."""
    from fluxes.formats.idset import IDSet
    from fluxes.store.resources import load_inventory, send_resource_event

    kind = "undrain" if call.request.url.path.endswith("/undrain") else "drain"
    refused = _need_login(call, f"{kind} nodes")
    if refused is not None:
        return refused
    inst = call.web.identities.instance(call.session)
    targets = form.get("targets", "").strip()
    rset = load_inventory(inst).rset()
    try:
        try:
            ranks = IDSet(targets)
        except ValueError:
            ranks = rset.ranks_for_hosts(targets)
        unknown = ranks - rset.ranks
        if unknown or not ranks:
            raise ValueError(f"unknown rank(s) {unknown}" if unknown else "name some nodes")
    except ValueError as exc:
        return _redirect(call, _back(call), f"{kind}: {exc}", error=True)
    reason = form.get("reason", "").strip()[:200] if kind == "drain" else ""
    try:
        send_resource_event(inst, kind, str(ranks), reason)
    except NoPermissionError:
        return _redirect(call, _back(call), f"{kind}: only the instance owner may do this",
                         error=True)
    hosts = str(rset.copy_ranks(ranks).hostlist)
    return _redirect(call, _back(call), f"{kind} of {hosts} sent (the scheduler applies it "
                     "within a second)")


def act_queue(call: Call, form: dict[str, str]) -> Response:
    """``POST /actions/queue``: start, stop, enable or disable a queue, as ``fluxes queue``
    does (the instance owner's Redis access needed)."""
    from fluxes import messages as proto
    from fluxes.domain.jm.queues import QueueEvent

    kind = form.get("kind", "")
    if kind not in ("start", "stop", "enable", "disable"):
        raise ValueError(f"unknown queue action {kind[:20]!r}")
    refused = _need_login(call, f"{kind} queues")
    if refused is not None:
        return refused
    inst = call.web.identities.instance(call.session)
    config = inst.config().queues
    name = form.get("queue") or None
    if name is not None:
        config.check_queue(name)
    elif config.queue_names != (None,):
        raise ValueError("name a queue")
    reason: str | None = form.get("reason", "").strip()[:200] or None
    if kind == "disable" and not reason:
        reason = "disabled by administrator"
    if kind in ("enable", "start"):
        reason = None
    event = QueueEvent(kind=kind, queue=name, timestamp=time.time(), reason=reason,
                       all_queues=False)
    pipe = inst.redis.pipeline(transaction=False)
    pipe.xadd(inst.keys.queues, {"d": orjson.dumps(event.to_dict())})
    for p in range(inst.keys.partitions):
        pipe.xadd(inst.keys.jm_ctl(p), proto.encode_entry([proto.QueuesChanged()]))
    try:
        pipe.execute()
    except NoPermissionError:
        return _redirect(call, _back(call, "/queues"),
                         f"queue {kind}: only the instance owner may do this", error=True)
    return _redirect(call, _back(call, "/queues"), f"queue {name or '(default)'}: {kind} sent")


def act_cancel(call: Call, form: dict[str, str]) -> Response:
    """``POST /actions/cancel``: cancel a job through the user's submit stream, as
    ``fluxes cancel`` (the ingest refuses another user's job)."""
    from fluxes.store.client import Client

    jobid = data.parse_job(form.get("jobid", ""))
    back = _back(call, f"/jobs/{jobids.encode(jobid, 'f58')}")
    refused = _need_login(call, "cancel jobs")
    if refused is not None:
        return refused
    inst = call.web.identities.instance(call.session)
    client = Client(inst, user=call.session.user)
    answer = client.cancel([jobid], note=form.get("note", "")[:200],
                           timeout=CANCEL_TIMEOUT_S)
    if answer["errors"]:
        return _redirect(call, back, f"cancel: {answer['errors'][0]}", error=True)
    return _redirect(call, back, f"job {jobids.encode(jobid, 'f58')}: cancel sent")


# ---------------------------------------------------------------- the application


def create_app(server: Instance, secret: str, snapshot_every: int = SNAPSHOT_EVERY,
               secure_cookies: bool = False, follow: bool = True,
               freeze: bool = False) -> Starlette:
    """The application for the instance ``server`` is connected to; ``secret`` signs
    session cookies (every server of an instance must share it). ``follow``: run the
    follower thread (the time index and live updates) while the app runs; ``freeze``:
    a process of its own, whose index may be frozen out of the cycle collector's sight."""
    index = TimeIndex(server, every=snapshot_every)
    web = Web(server, Sessions(secret), Identities(server), index, Live(index, freeze),
              secure_cookies=secure_cookies)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if follow:
            web.live.start()
        try:
            yield
        finally:
            await run_in_threadpool(web.live.stop)

    static = pkg_resources.files("fluxes.web") / "static"
    routes = [
        Route("/", _get(page_machine)),
        Route("/queues", _get(page_queues)),
        Route("/jobs", _get(page_jobs)),
        Route("/jobs/{job}", _get(page_job)),
        Route("/gantt", _get(page_gantt)),
        Route("/usage", _get(page_usage)),
        Route("/login", _get(page_login)),
        Route("/login", _post(act_login), methods=["POST"]),
        Route("/logout", _post(act_logout), methods=["POST"]),
        Route("/actions/drain", _post(act_drain), methods=["POST"]),
        Route("/actions/undrain", _post(act_drain), methods=["POST"]),
        Route("/actions/queue", _post(act_queue), methods=["POST"]),
        Route("/actions/cancel", _post(act_cancel), methods=["POST"]),
        Route("/api/jobs", _get(api_jobs, api=True)),
        Route("/api/jobs/{job}", _get(api_job, api=True)),
        Route("/api/resources", _get(api_resources, api=True)),
        Route("/api/queues", _get(api_queues, api=True)),
        Route("/api/gantt", _get(api_gantt, api=True)),
        Route("/api/usage", _get(api_usage, api=True)),
        Route("/api/timeline", _get(api_timeline, api=True)),
        Route("/api/steps", _get(api_steps, api=True)),
        Route("/api/whoami", _get(api_whoami, api=True)),
        Route("/api/events", api_events),
        Route("/favicon.ico", lambda _request: Response(status_code=204)),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.web = web
    return app
