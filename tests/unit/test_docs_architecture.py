"""docs/architecture.md stays true to the code: its key table names every key kind of
``fluxes/store/keys.py`` and its commit.lua op list every op the script knows."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from fluxes.store.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
#: Placeholder arguments and how the page writes them.
PLACEHOLDERS = {"partition": (0, None), "jobid": (424242, "<id>"), "rank": (31337, "<r>"),
                "user": ("USERNAME", "<user>"), "request": ("REQUESTID", "<request>"),
                "owner": (4711, "<owner>"), "digest": ("DIGEST", "<digest>"),
                "holder": ("HOLDER", "<holder>"), "token": ("TOKEN", "<token>")}
NOT_KEYS = {"g", "p", "partition_of", "same_slot", "blob_prefix"}


def documented_names() -> list[str]:
    """Every key kind as the page writes it: ``{p}:...`` or ``{ns}:...`` with placeholders."""
    keys = Keys("NS", 2)  # two partitions: partition keys {NS:p0}, global keys {NS}
    names = []
    for attr, member in inspect.getmembers(Keys):
        if attr.startswith("_") or attr in NOT_KEYS:
            continue
        if isinstance(member, property):
            name = getattr(keys, attr)
        elif callable(member):
            params = [p for p in inspect.signature(member).parameters if p != "self"]
            name = getattr(keys, attr)(*(PLACEHOLDERS[p][0] for p in params))
        else:
            continue
        name = name.replace("{NS:p0}", "{p}").replace("{NS}", "{ns}")
        for value, shown in PLACEHOLDERS.values():
            if shown is not None:
                name = name.replace(str(value), shown)
        names.append(name)
    return names


def test_key_table_lists_every_key() -> None:
    table = DOC[DOC.index("| key | type | holds |"):DOC.index("## The atomic commit step")]
    missing = [name for name in documented_names() if f"`{name}`" not in table]
    assert not missing, f"docs/architecture.md's key table lacks {missing}"


def test_commit_op_list_names_every_op() -> None:
    lua = (ROOT / "fluxes" / "store" / "lua" / "commit.lua").read_text()
    ops = set(re.findall(r"^--   ([A-Z]) ", lua, flags=re.M))
    assert {"E", "J", "H", "X", "A", "S"} <= ops
    section = DOC[DOC.index("## The atomic commit step"):DOC.index("## Job state")]
    missing = [op for op in sorted(ops) if f"`{op}`" not in section]
    assert not missing, f"docs/architecture.md's commit.lua op list lacks {missing}"
