"""Tests for fluxes.domain.sched.inventory: flux-style TOML, R, and their rules."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fluxes.domain.sched.inventory import Inventory, Target, format_size, parse_size
from fluxes.errors import ConfigError
from fluxes.formats.idset import IDSet
from fluxes.formats.rset import ResourceSet

EXAMPLE = """
[[resource.config]]
hosts = "test[1-100]"
cores = "0-7"

[[resource.config]]
hosts = "test[1,2]"
gpus = "0-1"

[[resource.config]]
hosts = "test[1-89]"
properties = ["batch"]

[[resource.config]]
hosts = "test[90-100]"
properties = ["debug"]
"""


def config(*entries: dict[str, Any]) -> dict[str, Any]:
    """A parsed configuration holding *entries* as resource.config."""
    return {"resource": {"config": list(entries)}}


# -- valid inventories -----------------------------------------------------------------


def test_flux_example() -> None:
    inv = Inventory.from_toml(EXAMPLE)
    assert len(inv) == 100
    assert inv.ncores == 800
    assert inv.ngpus == 4
    assert inv[0].hostname == "test1"
    assert inv[99].hostname == "test100"
    assert inv[0].gpus == IDSet("0-1")
    assert inv[2].gpus == IDSet()
    assert inv.properties == {"batch": IDSet("0-88"), "debug": IDSet("89-99")}
    assert inv[0].memory is None
    assert inv[0].sockets is None


def test_ranks_follow_first_appearance() -> None:
    inv = Inventory.from_config(config(
        {"hosts": "b[0-1]", "cores": "0"},
        {"hosts": "a0,b1,a1", "cores": "0-1"},
    ))
    assert [t.hostname for t in inv] == ["b0", "b1", "a0", "a1"]
    # b1 was updated by the second entry: a later entry overrides cores.
    assert inv[1].cores == IDSet("0-1")
    assert inv[0].cores == IDSet("0")


def test_later_entry_adds_properties_and_overrides_values() -> None:
    inv = Inventory.from_config(config(
        {"hosts": "n[0-3]", "cores": "0-3", "memory": "8G", "properties": ["a"]},
        {"hosts": "n[2-3]", "cores": "0-7", "memory": 1024, "properties": ["b"]},
    ))
    assert inv[0].properties == frozenset({"a"})
    assert inv[2].properties == frozenset({"a", "b"})
    assert inv[2].cores == IDSet("0-7")
    assert inv[2].memory == 1024
    assert inv[1].memory == 8 << 30


def test_sockets_split_cores_evenly_in_order() -> None:
    inv = Inventory.from_config(config({"hosts": "n0", "cores": "0-5,10-11", "sockets": 2}))
    assert inv[0].sockets == (IDSet("0-3"), IDSet("4-5,10-11"))
    assert inv[0].socket_sets() == inv[0].sockets


def test_no_sockets_means_one_socket() -> None:
    inv = Inventory.from_config(config({"hosts": "n0", "cores": "0-3"}))
    assert inv[0].socket_sets() == (IDSet("0-3"),)


def test_gpu_only_host() -> None:
    inv = Inventory.from_config(config({"hosts": "g0", "gpus": "0-3"}))
    assert inv[0].cores == IDSet() and inv[0].gpus == IDSet("0-3")


def test_accepts_the_array_itself() -> None:
    inv = Inventory.from_config([{"hosts": "n[0-1]", "cores": "0"}])
    assert len(inv) == 2


@pytest.mark.parametrize(("text", "size"), [
    (0, 0), (1024, 1024), ("1024", 1024), ("1K", 1024), ("1k", 1024), ("2M", 2 << 20),
    ("256G", 256 << 30), ("256GB", 256 << 30), ("256GiB", 256 << 30), ("1T", 1 << 40),
    ("1.5T", 3 << 39), (" 4 G ", 4 << 30), ("1P", 1 << 50),
])
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("value", "message"), [
    ("12X", "invalid size '12X'"), ("-1G", "invalid size"), (-5, "negative"),
    (True, "got bool"), (1.5, "got float"), ("", "invalid size"), ("2000P", "larger than"),
])
def test_parse_size_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size(value, "where")


def test_format_size() -> None:
    assert format_size(256 << 30) == "256G"
    assert format_size(1536 << 20) == "1536M"
    assert format_size(100) == "100"
    assert format_size(0) == "0"


# -- invalid inventories -----------------------------------------------------------------

INVALID: list[tuple[Any, str]] = [
    (config({"hosts": "n0", "cores": "0"}, {"hosts": "n1", "cores": "0"},
            {"hosts": "n2", "cores": "0-"}),
     "resource.config[2].cores: invalid idset '0-'"),
    (config({"cores": "0-3"}), "resource.config[0]: hosts is required"),
    (config({"hosts": "n0", "cpus": "0"}), "resource.config[0]: unknown key 'cpus'"),
    (config({"hosts": 5, "cores": "0"}),
     "resource.config[0].hosts: expected a hostlist string, got int"),
    (config({"hosts": "n[0-", "cores": "0"}), "resource.config[0].hosts: invalid hostlist"),
    (config({"hosts": "", "cores": "0"}), "resource.config[0].hosts: is empty"),
    (config({"hosts": "n0", "cores": 4}),
     "resource.config[0].cores: expected an idset string, got int"),
    (config({"hosts": "n0", "cores": "0", "gpus": "x"}),
     "resource.config[0].gpus: invalid idset 'x'"),
    (config({"hosts": "n0", "cores": "0", "properties": "gpu"}),
     "resource.config[0].properties: expected a list of names, got str"),
    (config({"hosts": "n0", "cores": "0", "properties": ["ok", "b|d"]}),
     "resource.config[0].properties[1]: invalid character '|'"),
    (config({"hosts": "n0", "cores": "0", "memory": "lots"}),
     "resource.config[0].memory: invalid size 'lots'"),
    (config({"hosts": "n0", "cores": "0", "memory": -1}),
     "resource.config[0].memory: size -1 is negative"),
    (config({"hosts": "n0", "cores": "0-3", "sockets": 0}),
     "resource.config[0].sockets: expected a positive integer, got 0"),
    (config({"hosts": "n0", "cores": "0-3", "sockets": True}),
     "resource.config[0].sockets: expected a positive integer, got True"),
    (config({"hosts": "n0", "cores": "0-63"}, {"hosts": "n0", "sockets": 3}),
     "resource.config[1].sockets: 3 sockets do not divide the 64 cores of n0 evenly"),
    (config({"hosts": "n0", "gpus": "0", "sockets": 2}),
     "resource.config[0].sockets: 2 sockets do not divide the 0 cores of n0 evenly"),
    (config({"hosts": "n[0-1]", "cores": "0"}, {"hosts": "n2", "properties": ["x"]}),
     "resource.config[1]: host n2 has no cores or gpus"),
    (config({"hosts": "n0", "cores": ""}), "resource.config[0]: host n0 has no cores or gpus"),
    (config(), "resource.config: is empty"),
    ({"resource": {}}, "resource.config: is required"),
    ({}, "resource.config: is required"),
    ({"resource": []}, "resource: expected a table, got list"),
    ({"resource": {"config": "n0"}}, "resource.config: expected an array of tables, got str"),
    (config("n0"), "resource.config[0]: expected a table, got str"),  # type: ignore[arg-type]
    (config({"hosts": "n[0-4294967294]", "cores": "0"}),
     "resource.config[0].hosts: invalid hostlist"),
]


@pytest.mark.parametrize(("obj", "message"), INVALID)
def test_invalid_config(obj: Any, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        Inventory.from_config(obj)


def test_invalid_toml() -> None:
    with pytest.raises(ConfigError, match=r"^invalid TOML"):
        Inventory.from_toml("[[resource.config]\nhosts=")


def test_config_error_is_value_error() -> None:
    with pytest.raises(ValueError):
        Inventory.from_config(config({"cores": "0"}))


def test_targets_duplicate_rank() -> None:
    t = Target(3, "n3", IDSet("0"), IDSet())
    with pytest.raises(ConfigError, match=r"^inventory: duplicate rank 3$"):
        Inventory([t, t])


@pytest.mark.parametrize(("target", "message"), [
    (Target(0, "n0", IDSet(), IDSet()), "rank 0: has no cores or gpus"),
    (Target(0, "n0", IDSet("0-3"), IDSet(), sockets=(IDSet("0-1"), IDSet("1-3"))),
     "rank 0: sockets do not partition the cores"),
    (Target(0, "n0", IDSet("0-3"), IDSet(), sockets=(IDSet("0-1"),)),
     "rank 0: sockets do not partition the cores"),
    (Target(0, "n0", IDSet("0"), IDSet(), memory=-1), "rank 0: memory must be"),
    (Target(0, "n0", IDSet("0"), IDSet(), properties=frozenset({"a^b"})), "invalid character"),
    (Target(-1, "n0", IDSet("0"), IDSet()), "invalid rank -1"),
])
def test_bad_targets(target: Target, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Inventory([target])


def test_targets_hostnames_all_or_none() -> None:
    with pytest.raises(ConfigError, match=re.escape("rank(s) 1 have no hostname")):
        Inventory([Target(0, "n0", IDSet("0"), IDSet()), Target(1, None, IDSet("0"), IDSet())])


# -- R and round trips -----------------------------------------------------------------------


def test_to_rset() -> None:
    inv = Inventory.from_toml(EXAMPLE)
    rset = inv.to_rset()
    assert rset.nnodes == 100
    assert rset.ncores == 800
    assert rset.ngpus == 4
    assert rset.hostname(5) == "test6"
    assert rset.ranks_with_property("debug") == IDSet("89-99")
    # A copy: changing it does not change the inventory's.
    rset.set_property("x")
    assert "x" not in inv.to_rset().properties


def test_from_rset() -> None:
    rset = ResourceSet.from_ranks({0: ("0-3", "0"), 5: ("0-1", None)}, hostnames=["a", "b"],
                                  properties={"gpu": "0"})
    inv = Inventory.from_rset(rset.encode())
    assert list(inv.ranks) == [0, 5]
    assert inv[0].gpus == IDSet("0")
    assert inv[5].hostname == "b"
    assert inv[0].properties == frozenset({"gpu"})
    assert inv.to_rset() == rset
    assert Inventory.from_rset(rset) == inv


def test_from_rset_without_hostnames() -> None:
    inv = Inventory.from_rset(ResourceSet.from_ranks({0: ("0", None)}))
    assert inv[0].hostname is None
    assert inv.to_rset().has_hostnames is False


def test_from_bad_rset() -> None:
    with pytest.raises(ConfigError, match="R: missing 'version'"):
        Inventory.from_rset({"execution": {}})


def test_dict_round_trip() -> None:
    inv = Inventory.from_config(config(
        {"hosts": "n[0-7]", "cores": "0-15", "memory": "64G", "sockets": 2},
        {"hosts": "n[6-9]", "cores": "0-31", "gpus": "0-3", "properties": ["gpu", "big"]},
    ))
    data = inv.to_dict()
    assert data["version"] == 1
    assert len(data["targets"]) == 3
    back = Inventory.from_dict(data)
    assert back == inv
    assert back.to_dict() == data


@pytest.mark.parametrize(("obj", "message"), [
    ({}, "version 1"),
    ({"version": 1, "targets": 3}, "inventory.targets: expected a list"),
    ({"version": 1, "targets": [3]}, r"inventory.targets\[0\]: expected an object"),
    ({"version": 1, "targets": [{"ranks": "0", "cores": "z"}]},
     r"inventory.targets\[0\].cores: invalid idset"),
    ({"version": 1, "targets": [{"ranks": "0-1", "hosts": "a", "cores": "0"}]},
     r"inventory.targets\[0\].hosts: 1 hosts for 2 ranks"),
    ({"version": 1, "targets": [{"ranks": "0", "cores": "0"}, {"ranks": "0", "cores": "1"}]},
     "duplicate rank 0"),
])
def test_from_dict_rejects(obj: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Inventory.from_dict(obj)


def test_big_inventory_is_cheap() -> None:
    inv = Inventory.from_config(config({"hosts": "n[0-8191]", "cores": "0-63", "sockets": 2,
                                        "memory": "256G"}))
    assert len(inv) == 8192
    # Identical targets share their IDSets.
    assert inv[0].cores is inv[8191].cores
    assert inv[0].sockets is inv[8191].sockets
    assert len(inv.to_dict()["targets"]) == 1
