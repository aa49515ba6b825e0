"""Forecasts of a live instance for the CLI and the web: run, and kept a few seconds.

:func:`cached_forecast` reads the instance's state (:func:`fluxes.store.forecast.read_snapshot`,
read-only), runs :func:`fluxes.forecast.forecast` on it, and keeps the result for
``[forecast] cache`` seconds: in this process (the web server), and in a file of
this user's (the next command of the same user: ``fluxes jobs --forecast`` then
``fluxes job forecast``), never in the instance.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fluxes.forecast.model import ForecastRun, RuntimeSource

if TYPE_CHECKING:
    from fluxes.store.instance import Instance

__all__ = ["FORECAST_FORMAT", "add_forecasts", "cached_forecast", "forecast_view"]

#: ``fluxes jobs --forecast``'s format: the pending view with each job's expected start
FORECAST_FORMAT = ("{id.f58:>12} ?:{queue:<8.8} {username:<8.8} {name:<10.10} "
                   "{status_abbrev:>2.2} {ntasks:>6} {nnodes:>6} {t_forecast!D:>19} "
                   "{contextual_info}")

_lock = threading.Lock()
#: (connection, namespace, runtime source, the jobs asked about or ()) -> (when, forecast)
_cache: dict[tuple[int, str, str, tuple[int, ...]], tuple[float, ForecastRun]] = {}
#: Forecasts of some jobs kept at most (the web's job pages), before the oldest go.
_PARTIAL_KEPT = 256


def cached_forecast(instance: Instance, runtime: RuntimeSource | None = None,
                    ttl: float | None = None, wanted: Iterable[int] | None = None
                    ) -> ForecastRun:
    """The forecast of the instance now, reused for ``ttl`` seconds (default: ``[forecast]
    cache``); ``runtime`` defaults to ``[forecast] runtime``. ``wanted``: the jobs asked
    about; a forecast of every job still fresh answers, else the run stops once they
    have started (the answer then leaves out the jobs not reached)."""
    config = instance.config().forecast
    source: Any = runtime or config.runtime
    keep = config.cache if ttl is None else ttl
    full = (id(instance.redis), instance.keys.ns, str(source), ())
    some = (*full[:3], tuple(sorted(set(wanted)))) if wanted is not None else full
    found = _fresh(full, keep) or _fresh(some, keep)
    if found is not None:
        return found
    path = _cache_file(instance, str(source)) if keep > 0 else None
    run = _read_cached(path, keep) if path is not None else None
    if run is None:
        from fluxes.forecast.engine import forecast
        from fluxes.store.forecast import read_snapshot

        snap = read_snapshot(instance, history=source == "history")
        run = forecast(snap, source, None if wanted is None else some[3])
        if path is not None and run.complete:
            _write_cached(path, run)
    with _lock:
        if len(_cache) > _PARTIAL_KEPT:
            _cache.clear()
        _cache[full if run.complete else some] = (time.monotonic(), run)
    return run


def _fresh(key: tuple[int, str, str, tuple[int, ...]], keep: float) -> ForecastRun | None:
    with _lock:
        found = _cache.get(key)
    if found is not None and time.monotonic() - found[0] < keep:
        return found[1]
    return None


def _cache_file(instance: Instance, source: str) -> Path:
    """This user's cache file of the instance's forecast (one command's forecast serves
    the next for a few seconds): in ``$XDG_RUNTIME_DIR``, else the temporary directory;
    never in the instance."""
    where = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    name = hashlib.sha1(f"{instance.uri.redis_url}|{instance.keys.ns}|{source}".encode()
                        ).hexdigest()[:16]
    return Path(where) / f"fluxes-forecast-{os.getuid()}-{name}.json"


def _read_cached(path: Path, keep: float) -> ForecastRun | None:
    """The cached forecast when it is fresh, this user's own, and readable; else None."""
    try:
        st = path.stat()
        if st.st_uid != os.getuid() or time.time() - st.st_mtime >= keep:
            return None
        return ForecastRun.from_obj(orjson.loads(path.read_bytes()))
    except (OSError, ValueError):
        return None


def _write_cached(path: Path, run: ForecastRun) -> None:
    """Write the cache atomically, readable by this user only (failures are ignored: the
    cache only saves time)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(run.to_obj()))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def forecast_view(args: Any) -> None:
    """``fluxes jobs --forecast``: the pending jobs (unless ``-f`` or ids are given) in the
    format with the START column (unless ``-o`` or ``--csv`` is given)."""
    if args.format == "default" and not args.csv:
        args.format = FORECAST_FORMAT
    if args.filter is None and not args.ids:
        args.filter = "pending"


def add_forecasts(inst: Instance, rows: Sequence[Any]) -> None:
    """Set each pending row's ``t_forecast`` (its expected start; ``-``: never) from the
    instance's forecast (cached a few seconds: ``[forecast] cache``)."""
    if not any(row.state in _PENDING_NAMES for row in rows):
        return
    run = cached_forecast(inst, wanted=[int(r.id) for r in rows
                                        if r.state in _PENDING_NAMES])
    for row in rows:
        if row.state not in _PENDING_NAMES:
            continue
        found = run.jobs.get(int(row.id))
        row.t_forecast = "-" if found is None or found.t_start is None else found.t_start


_PENDING_NAMES = frozenset(("DEPEND", "PRIORITY", "SCHED"))
