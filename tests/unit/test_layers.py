"""The layers of docs/architecture.md hold: imports point down only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: What the pure layers never import: Redis, processes, or anything above them.
_ABOVE_PURE = ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.service", "fluxes.cli",
               "fluxes.web", "fluxes.job", "fluxes.bench", "fluxes.drill", "workers")

#: package -> module prefixes it must never import (directly or inside a function).
#: Top to bottom (docs/architecture.md, "Layers"): cli and web (the doors) -> service
#: (what both doors do) -> store and proc (the adapters) -> domain and formats (pure);
#: workers wire the adapters and cores, and nothing in fluxes/ imports them.
FORBIDDEN = {
    "fluxes/formats": (*_ABOVE_PURE, "fluxes.domain"),
    "fluxes/domain": (*_ABOVE_PURE, "subprocess"),
    # the wire types: decoded in one bounded step at the door, by every layer above
    "fluxes/messages": (*_ABOVE_PURE, "fluxes.domain", "subprocess"),
    "fluxes/cli": ("workers",),
    # the web server is a door of its own: what it shares with the CLI is in fluxes/service
    "fluxes/web": ("fluxes.cli", "workers"),
    "fluxes/service": ("fluxes.cli", "fluxes.web", "fluxes.bench", "fluxes.drill", "workers"),
    "fluxes/store": ("fluxes.proc", "fluxes.service", "fluxes.cli", "fluxes.web",
                     "fluxes.bench", "fluxes.drill", "workers"),
    "fluxes/proc": ("fluxes.service", "fluxes.cli", "fluxes.web", "fluxes.bench",
                    "fluxes.drill", "workers"),
    "fluxes/job": ("workers",),
    "fluxes/bench": ("fluxes.cli", "workers"),
    "fluxes/drill": ("fluxes.cli", "fluxes.web", "fluxes.bench", "workers"),
    # the simulator drives the pure cores on a virtual clock: no Redis, no processes
    "fluxes/sim": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.web", "workers"),
    # forecasts run the simulator on a snapshot: pure, like it (the store reads the snapshot)
    "fluxes/forecast": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.web",
                        "fluxes.cli", "workers", "subprocess"),
}

#: Imports that break the rules above, each with why (none today: add one only with a
#: reason and an issue that removes it).
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, with the line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package: str) -> None:
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, module in imports_of(path):
            if (rel, module) in KNOWN_EXCEPTIONS:
                continue
            if any(module == p or module.startswith(p + ".") for p in FORBIDDEN[package]):
                bad.append(f"{rel}:{line}: imports {module}")
    assert not bad, "\n".join(bad)


def test_every_package_has_its_rules() -> None:
    """A new package under fluxes/ says what it may not import (an entry in FORBIDDEN)."""
    packages = {f"fluxes/{p.name}" for p in (ROOT / "fluxes").iterdir()
                if (p / "__init__.py").exists()}
    # fluxes/forecast is being written this round (engineer "forecast"): give it its rules
    assert packages - set(FORBIDDEN) <= {"fluxes/forecast"}, sorted(packages - set(FORBIDDEN))


def test_nothing_in_fluxes_imports_workers() -> None:
    """workers/ wire the layers into processes: no module of fluxes/ imports them."""
    bad = []
    for path in sorted((ROOT / "fluxes").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for line, module in imports_of(path):
            if module.split(".")[0] == "workers" and (rel, module) not in KNOWN_EXCEPTIONS:
                bad.append(f"{rel}:{line}: imports {module}")
    assert not bad, "\n".join(bad)



#: the only modules that may import the Redis client: the store adapter, and the
#: module that runs a private redis-server process
REDIS_ALLOWED = ("fluxes/store/", "fluxes/proc/redis_server.py")


def redis_importers(root: Path) -> list[str]:
    """``path:line: imports X`` for every import of redis/hiredis under ``root``'s fluxes/
    and workers/ outside ``REDIS_ALLOWED``, function-local imports included."""
    bad = []
    for path in sorted(p for top in ("fluxes", "workers") for p in (root / top).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(REDIS_ALLOWED):
            continue
        for line, module in imports_of(path):
            if module.split(".")[0] in ("redis", "hiredis"):
                bad.append(f"{rel}:{line}: imports {module}")
    return bad


def test_only_the_adapters_import_redis() -> None:
    bad = redis_importers(ROOT)
    assert not bad, "\n".join(bad)


def test_redis_importers_sees_function_local_imports(tmp_path: Path) -> None:
    # the check itself must see an import inside a function, and spare the adapters
    text = "import os\n\n\ndef f():\n    import redis.exceptions\n    from hiredis import Reader\n"
    for rel in ("fluxes/cli/probe.py", "fluxes/store/probe.py", "fluxes/proc/redis_server.py",
                "workers/probe.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert redis_importers(tmp_path) == [
        "fluxes/cli/probe.py:5: imports redis.exceptions",
        "fluxes/cli/probe.py:6: imports hiredis",
        "workers/probe.py:5: imports redis.exceptions",
        "workers/probe.py:6: imports hiredis",
    ]


#: a module longer than this says in its docstring why it stays one module
LONG_MODULE_LINES = 600
REASON = "Why one module:"


def long_modules_without_reason(root: Path) -> list[str]:
    """``path: N lines`` for every module under fluxes/ and workers/ longer than
    ``LONG_MODULE_LINES`` whose docstring does not give its reason."""
    bad = []
    for path in sorted(p for top in ("fluxes", "workers") for p in (root / top).rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        if lines > LONG_MODULE_LINES and REASON not in (ast.get_docstring(ast.parse(text)) or ""):
            bad.append(f"{path.relative_to(root).as_posix()}: {lines} lines")
    return bad


def test_long_modules_say_why_they_stay_one() -> None:
    bad = long_modules_without_reason(ROOT)
    assert not bad, f"split these, or say why not ({REASON!r} in the docstring):\n" + "\n".join(bad)


def test_long_modules_check_reads_the_docstring(tmp_path: Path) -> None:
    (tmp_path / "fluxes").mkdir()
    filler = "x = 1\n" * LONG_MODULE_LINES
    (tmp_path / "fluxes" / "short.py").write_text('"""Short."""\n')
    (tmp_path / "fluxes" / "said.py").write_text(f'"""Big.\n\n{REASON} one type."""\n{filler}')
    (tmp_path / "fluxes" / "silent.py").write_text(f'"""Big."""\n# {REASON} in a comment\n{filler}')
    assert long_modules_without_reason(tmp_path) == [
        f"fluxes/silent.py: {LONG_MODULE_LINES + 2} lines"]


# ---------------------------------------------------------------- raw Redis in the wiring

#: Redis commands as redis-py names its client methods (and ``pipeline``/``execute_command``,
#: the ways around them).
REDIS_COMMANDS = frozenset(["xadd", "xrange", "xrevrange", "xread", "xreadgroup", "xack", "xlen", "xtrim", "xdel", "xautoclaim", "xclaim", "xpending", "xpending_range", "xinfo_stream", "xinfo_groups", "xinfo_consumers", "xgroup_create", "xgroup_destroy", "xgroup_setid", "xgroup_createconsumer", "xgroup_delconsumer", "hget", "hgetall", "hset", "hmget", "hmset", "hdel", "hincrby", "hkeys", "hvals", "hexists", "hlen", "hsetnx", "hscan", "hscan_iter", "get", "set", "mget", "mset", "getset", "setnx", "setex", "psetex", "delete", "unlink", "exists", "expire", "pexpire", "ttl", "pttl", "persist", "incr", "incrby", "decr", "decrby", "type", "rename", "sadd", "srem", "smembers", "sismember", "scard", "zadd", "zrange", "zrangebyscore", "zrevrange", "zrevrangebyscore", "zrem", "zscore", "zcard", "zincrby", "zremrangebyscore", "zremrangebyrank", "lpush", "rpush", "lpop", "rpop", "lrange", "llen", "ltrim", "blpop", "brpop", "lmove", "blmove", "eval", "evalsha", "fcall", "fcall_ro", "script_load", "function_load", "pipeline", "transaction", "execute_command", "publish", "pubsub", "scan", "scan_iter", "keys", "ping", "info", "time", "dbsize", "flushdb", "flushall", "config_get", "config_set", "acl_setuser", "acl_deluser", "acl_list", "client_list", "client_kill", "watch", "multi"])

#: What a Redis client or pipeline is called where it is used (``inst.redis``,
#: ``self.redis``, ``client``, ``pipe``, ...): the receiver's last name.
REDIS_RECEIVERS = frozenset({"redis", "_redis", "r", "client", "_client", "pipe", "_pipe",
                             "pipeline", "conn", "rc"})

#: Receivers that name a client only as a bare variable.
SHORT_RECEIVERS = frozenset({"r", "rc", "conn"})

#: Where raw calls are counted: the wiring (workers and the two doors) and the service
#: layer under the doors; the store's named methods are where they belong.
WIRING = ("workers", "fluxes/cli", "fluxes/web", "fluxes/service")

#: Raw Redis calls the wiring may still make (issue 25: <= 10): none are left: workers,
#: the CLI, the web and the service layer call store methods that name what they do
#: (the workers' few remaining helpers, such as ``ensure_group``, are store functions).
RAW_REDIS_CEILING = 0


def raw_redis_calls(root: Path, tops: tuple[str, ...] = WIRING) -> list[str]:
    """``path:line: receiver.command`` for each call of a Redis command method on a
    Redis client or pipeline under ``tops`` of ``root``."""
    def receiver(node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            # a short name is a client only as a variable (``r.get``), not as some
            # object's field (``fx.r.get``: the effects' map of R)
            return node.attr if node.attr not in SHORT_RECEIVERS else ""
        if isinstance(node, ast.Call):  # inst.redis.pipeline().xadd(...)
            return receiver(node.func)
        return ""

    found = []
    for path in sorted(p for top in tops for p in (root / top).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in REDIS_COMMANDS):
                name = receiver(node.func.value)
                if name in REDIS_RECEIVERS:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: "
                                 f"{name}.{node.func.attr}")
    return found


def test_raw_redis_calls_stay_under_the_ceiling() -> None:
    found = raw_redis_calls(ROOT)
    assert len(found) <= RAW_REDIS_CEILING, (
        f"{len(found)} raw Redis calls in {', '.join(WIRING)} (ceiling "
        f"{RAW_REDIS_CEILING}): put the new ones behind a store method that names what it "
        "does\n" + "\n".join(found))


def test_the_doors_and_the_service_layer_make_no_raw_redis_calls() -> None:
    found = raw_redis_calls(ROOT, ("fluxes/cli", "fluxes/web", "fluxes/service"))
    assert not found, "\n".join(found)


def test_raw_redis_calls_are_counted(tmp_path: Path) -> None:
    (tmp_path / "workers").mkdir()
    (tmp_path / "workers" / "probe.py").write_text(
        "def f(inst, self, d):\n"
        "    inst.redis.xadd('s', {})\n"
        "    pipe = inst.redis.pipeline(transaction=False)\n"
        "    pipe.hget('h', 'f')\n"
        "    self.redis.pipeline().execute_command('PING')\n"
        "    d.get('x')\n"  # a dict's get: not a Redis client
        "    store.append(1)\n"  # a store method: named, not raw
        "    fx.r.get(0)\n"  # a field named r: not a client
        "    r.set('k', 1)\n")  # a client in a variable named r
    assert sorted(raw_redis_calls(tmp_path, ("workers",))) == [
        "workers/probe.py:2: redis.xadd", "workers/probe.py:3: redis.pipeline",
        "workers/probe.py:4: pipe.hget", "workers/probe.py:5: pipeline.execute_command",
        "workers/probe.py:5: redis.pipeline", "workers/probe.py:9: r.set"]


# ---------------------------------------------------------------- import circles

#: Circles allowed: cmd_account and account_admin are one command split in two files
#: (the admin half imports the helpers, the command registers the admin half).
ALLOWED_CIRCLES = [{"fluxes.cli.account_admin", "fluxes.cli.cmd_account"}]


def module_graph(root: Path, tops: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``tops`` it imports (function-local imports included,
    those for type checkers only not; ``from pkg import mod`` counts as ``pkg.mod``)."""
    paths = {}
    for top in tops:
        for path in (root / top).rglob("*.py"):
            name = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps = set()
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
                       for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_in_the_doors_and_the_service_layer() -> None:
    """A command module imports what it needs from below (fluxes/service, the store), never
    a command that imports it back (issue 25: cmd_batch/cmd_jobs/cmd_submit/top and
    cmd_job/cmd_jobtools were such circles)."""
    circles = import_circles(module_graph(ROOT, ("fluxes/cli", "fluxes/web", "fluxes/service")))
    assert [c for c in circles if c not in ALLOWED_CIRCLES] == []


def test_import_circles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [{"a", "b", "c"}]
