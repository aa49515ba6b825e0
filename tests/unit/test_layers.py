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
    # the simulator drives the pure cores on a virtual clock: no Redis, no processes
    "fluxes/sim": ("redis", "hiredis", "fluxes.store", "fluxes.proc", "fluxes.web", "workers"),
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
