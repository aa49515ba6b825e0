"""The layers of docs/architecture.md hold: imports point down only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: package -> module prefixes it must never import (directly or inside a function)
FORBIDDEN = {
    "fluxes/formats": ("redis", "hiredis", "fluxes.domain", "fluxes.store", "fluxes.proc",
                       "fluxes.cli", "fluxes.bench", "fluxes.drill", "workers"),
    "fluxes/domain": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.cli",
                      "fluxes.bench", "fluxes.drill", "workers", "subprocess"),
    "fluxes/cli": ("workers",),
    "fluxes/store": ("fluxes.cli", "workers"),
    "fluxes/proc": ("fluxes.cli", "workers"),
    "fluxes/web": ("workers",),
    "fluxes/job": ("workers",),
    # the simulator drives the pure cores on a virtual clock: no Redis, no processes
    "fluxes/sim": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.web", "workers"),
    # forecasts run the simulator on a snapshot: pure, like it (the store reads the snapshot)
    "fluxes/forecast": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.web",
                        "fluxes.cli", "workers", "subprocess"),
}


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
        for line, module in imports_of(path):
            if any(module == p or module.startswith(p + ".") for p in FORBIDDEN[package]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
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
