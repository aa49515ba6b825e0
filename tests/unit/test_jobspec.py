"""Tests for fluxes.formats.jobspec and fluxes.formats.jobspec_rules (RFC 14, 25, 26, 31 jobspec)."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # no stubs in the venv
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4, DRAFT7

from fluxes.domain.sched.request import Request
from fluxes.errors import JobspecError
from fluxes.formats import jobspec_rules, jobspec_yaml
from fluxes.formats.counts import Count
from fluxes.formats.jobspec import MAX_DEPTH, MAX_JOBSPEC_BYTES, Jobspec, parse_dependency

TESTS = Path(__file__).resolve().parents[1]
SPEC_DATA = TESTS / "spec-data"
CASES = TESTS / "cases" / "jobspec"

RFC14_FILES = sorted((SPEC_DATA / "rfc14").glob("*.yaml"))
RFC25_FILES = sorted((SPEC_DATA / "rfc25").glob("*.yaml"))
RFC26_FILES = sorted((SPEC_DATA / "rfc26").glob("*.yaml"))
VALID_CASES = sorted((CASES / "valid").glob("*.yaml"))
INVALID_CASES = sorted((CASES / "invalid").glob("*.yaml"))


def load_spec(path: Path) -> Any:
    """A spec-data file as plain data."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def header(path: Path) -> dict[str, str]:
    """The ``# key: value`` lines that open a case file (error, v1, warning)."""
    meta: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        match = re.match(r"#\s*(error|v1|warning):\s*(.*)$", line)
        if match:
            meta[match[1]] = match[2].strip()
    return meta


# -- the published schemas, as references -------------------------------------------


def _published_validators() -> tuple[Any, Any, Any]:
    rfc14 = json.loads((SPEC_DATA / "rfc14" / "schema.json").read_text())
    rfc25 = json.loads((SPEC_DATA / "rfc25" / "schema.json").read_text())
    rfc26 = json.loads((SPEC_DATA / "rfc26" / "schema.json").read_text())
    # rfc14 refers to rfc26 by a path relative to the RFC repository root.
    registry = Registry().with_resource(
        "file:data/spec_26/schema.json", Resource.from_contents(rfc26, default_specification=DRAFT4)
    )
    registry = registry.with_resource(
        rfc14["$id"], Resource.from_contents(rfc14, default_specification=DRAFT7)
    )
    return (
        jsonschema.Draft7Validator(rfc14, registry=registry),
        jsonschema.Draft7Validator(rfc25),
        jsonschema.Draft4Validator(rfc26),
    )


THEIRS14, THEIRS25, THEIRS26 = _published_validators()


def ours_ok(doc: Any, v1: bool = False) -> bool:
    """True if fluxes accepts ``doc``."""
    try:
        Jobspec.from_dict(doc, v1=v1)
    except JobspecError:
        return False
    return True


def error_of(doc: Any, v1: bool = False) -> str:
    """The JobspecError message fluxes gives for ``doc``."""
    with pytest.raises(JobspecError) as info:
        Jobspec.from_dict(doc, v1=v1)
    return str(info.value)


# -- spec-data: every RFC example -----------------------------------------------------


@pytest.mark.parametrize("path", RFC14_FILES + RFC25_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rfc_examples_are_valid(path: Path) -> None:
    jobspec = Jobspec.from_file(path)
    assert jobspec.to_dict() == load_spec(path)
    assert jobspec.warnings == []


@pytest.mark.parametrize("path", RFC25_FILES, ids=lambda p: p.name)
def test_rfc25_examples_are_valid_v1(path: Path) -> None:
    assert Jobspec.from_file(path, v1=True).is_v1


def test_rfc14_example1_is_v1_but_example2_is_not() -> None:
    Jobspec.from_file(SPEC_DATA / "rfc14" / "example1.yaml", v1=True)
    canonical = Jobspec.from_file(SPEC_DATA / "rfc14" / "example2.yaml")
    assert canonical.version == 1
    with pytest.raises(JobspecError, match=r"a V1 slot must contain one core"):
        Jobspec.from_file(SPEC_DATA / "rfc14" / "example2.yaml", v1=True)


@pytest.mark.parametrize("path", RFC14_FILES, ids=lambda p: p.name)
def test_rfc14_use_cases_are_not_v1(path: Path) -> None:
    if path.name.startswith("use_case"):
        with pytest.raises(JobspecError, match=r"^version: a V1 jobspec must have version 1"):
            Jobspec.from_file(path, v1=True)


def test_use_case_1_2_node_count_is_3_to_30() -> None:
    jobspec = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_1.2.yaml")
    count = Count.decode(jobspec.resources[0]["count"])
    assert jobspec.resources[0]["with"][0]["type"] == "node"
    assert list(count) == list(range(3, 31))
    assert 2 not in count and 31 not in count
    assert jobspec.nnodes == 3 and jobspec.nslots == 3


def test_use_case_1_8_is_perfect_squares() -> None:
    jobspec = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_1.8.yaml")
    count = Count.decode(jobspec.resources[0]["count"])
    squares = [n * n for n in range(1, 6) if 3 <= n * n <= 30]
    assert list(count) == squares == [4, 9, 16, 25]
    # The file writes the squares as an idset; the "^" operator cannot say
    # "perfect squares" (2^2 = 4, 4^2 = 16, 16^2 = 256: repeated squaring).
    assert list(Count.decode({"min": 2, "max": 30, "operator": "^", "operand": 2})) == [2, 4, 16]
    assert jobspec.nnodes == 4


def test_use_case_2_4_totals() -> None:
    jobspec = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_2.4.yaml")
    # 10 read-db slots of 1 core + 4 GB and one db slot of 6 cores + 24 GB on one node.
    assert jobspec.nnodes == 1
    assert jobspec.nslots == 11
    assert jobspec.ncores == 10 * 1 + 6
    assert jobspec.resource_counts == {"node": 1, "slot": 11, "core": 16, "memory": 64}
    assert jobspec.slot_size == 6  # the largest slot
    assert [t["slot"] for t in jobspec.tasks] == ["read-db", "db"]


def test_rfc25_use_case_2_4_totals() -> None:
    jobspec = Jobspec.from_file(SPEC_DATA / "rfc25" / "use_case_2.4.yaml", v1=True)
    assert (jobspec.nnodes, jobspec.nslots, jobspec.ncores, jobspec.ngpus) == (4, 16, 16, 16)
    assert (jobspec.slot_size, jobspec.gpus_per_slot) == (1, 1)


@pytest.mark.parametrize(
    ("name", "nnodes", "nslots", "ncores", "ngpus", "exclusive"),
    [
        ("rfc14/example1.yaml", 4, 4, 8, 0, False),
        ("rfc14/example2.yaml", 4, 4, 0, 0, True),
        ("rfc14/use_case_1.3.yaml", 4, 4, 32, 0, False),
        ("rfc14/use_case_1.4.yaml", 4, 4, 32, 0, True),
        ("rfc14/use_case_1.5.yaml", 4, 4, 4, 0, True),
        ("rfc14/use_case_1.6.yaml", 2, 2, 60, 0, False),
        ("rfc14/use_case_1.7.yaml", 3, 3, 3, 0, False),
        ("rfc14/use_case_2.3.yaml", 0, 10, 20, 0, False),
        ("rfc25/use_case_2.3.yaml", 0, 10, 20, 10, False),
    ],
)
def test_derived_totals(
    name: str, nnodes: int, nslots: int, ncores: int, ngpus: int, exclusive: bool
) -> None:
    jobspec = Jobspec.from_file(SPEC_DATA / name)
    assert (jobspec.nnodes, jobspec.nslots, jobspec.ncores, jobspec.ngpus) == (
        nnodes,
        nslots,
        ncores,
        ngpus,
    )
    assert jobspec.exclusive is exclusive


def test_use_case_attributes() -> None:
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_2.8.yaml")
    assert [d["value"] for d in js.dependencies] == ["hungry-hippo-white-elephant", "foo", "bar"]
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_2.9.yaml")
    assert js.constraints == {"properties": ["amd-mi50"]}
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_2.7.yaml")
    assert js.tasks[1]["attributes"]["environment"] == {"FOO": None, "BAR": "2"}
    assert js.environment == {"FOO": "/tmp", "BAR": "1"}
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "example1.yaml")
    assert (js.duration, js.cwd, js.queue, js.name, js.command) == (
        3600.0,
        "/home/flux",
        None,
        "app",
        ["app"],
    )


@pytest.mark.parametrize("path", RFC26_FILES, ids=lambda p: p.name)
def test_rfc26_examples_as_dependencies(path: Path) -> None:
    deps = load_spec(path)
    assert THEIRS26.is_valid(deps)
    doc = load_spec(SPEC_DATA / "rfc14" / "example1.yaml")
    doc["attributes"]["system"]["dependencies"] = deps
    jobspec = Jobspec.from_dict(doc, v1=True)
    assert jobspec.dependencies == deps
    assert THEIRS14.is_valid(doc)


# -- our schema against the published ones ------------------------------------------------


def test_our_schema_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(jobspec_rules.schema())


@pytest.mark.parametrize("path", RFC14_FILES + RFC25_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_published_examples_valid_under_both(path: Path) -> None:
    doc = load_spec(path)
    assert THEIRS14.is_valid(doc)
    assert ours_ok(doc)
    jobspec_rules.check_schema(doc, fast=False)
    if path.parent.name == "rfc25":
        assert THEIRS25.is_valid(doc)
        assert ours_ok(doc, v1=True)


def _example() -> dict[str, Any]:
    return load_spec(SPEC_DATA / "rfc14" / "example1.yaml")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation that sets a dotted path (ints index lists)."""

    def apply(doc: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        node: Any = doc
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value

    return apply


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
        node: Any = doc
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]

    return apply


# Each documented difference (docs/formats/jobspec.md) between our rules and a
# published schema: (id, mutation of RFC 14 example1, v1, theirs valid, ours valid).
DIFFERENCES: list[tuple[str, Callable[[dict[str, Any]], None], bool, bool, bool]] = [
    # RFC 26 text: only scheme and value are required.
    ("rfc26-scheme-value-only", _set("attributes.system.dependencies", [{"scheme": "afterok", "value": "f123"}]), False, False, True),
    # RFC 26 text: other keys are allowed, with scheme-defined meaning.
    ("rfc26-extra-keys", _set("attributes.system.dependencies", [{"scheme": "x", "value": "y", "when": "now"}]), False, False, True),
    # RFC 26 text: string/fluid need type and scope (the schema wants them always).
    ("rfc26-afterok-bad-jobid", _set("attributes.system.dependencies", [{"scheme": "afterok", "value": "nope", "type": "in", "scope": "user"}]), False, True, False),
    # The schema's idset and range patterns both match "1-4" and "1", so its oneOf fails.
    ("rfc14-count-string-1-4", _set("resources.0.count", "1-4"), False, False, True),
    ("rfc14-count-string-1", _set("resources.0.count", "1"), False, False, True),
    # Count relations only the text states.
    ("rfc14-count-max-below-min", _set("resources.0.count", {"min": 4, "max": 2, "operator": "+", "operand": 1}), False, True, False),
    ("rfc14-count-power-min-1", _set("resources.0.count", {"min": 1, "max": 8, "operator": "^", "operand": 2}), False, True, False),
    # Not a difference: the current text and the schema both want max, operator
    # and operand together (the spec-data README quotes an older text).
    ("rfc14-count-min-max-only", _set("resources.0.count", {"min": 4, "max": 6}), False, False, False),
    ("rfc14-count-min-operator-operand", _set("resources.0.count", {"min": 2, "operator": "*", "operand": 2}), False, False, False),
    # RFC 14 text: attributes is a dictionary (the schema also allows null).
    ("rfc14-attributes-null", _set("attributes", None), False, True, False),
    # RFC 14 text: task attributes are free-form (the schema wants string values).
    ("rfc14-task-attributes-free-form", _set("tasks.0.attributes", {"retries": 3}), False, False, True),
    # RFC 14 text: tasks MUST define at least one task.
    ("rfc14-tasks-empty", _set("tasks", []), False, True, False),
    # RFC 14 text: a slot has at least one edge.
    ("rfc14-slot-without-with", _delete("resources.0.with.0.with"), False, True, False),
    # RFC 14 text: label unique; task slot names a slot label.
    ("rfc14-duplicate-label", _set("resources.0.label", "default"), False, True, False),
    ("rfc14-task-slot-unknown", _set("tasks.0.slot", "nope"), False, True, False),
    # RFC 14 text: environment values are strings or null; cwd absolute; job values strings.
    ("rfc14-environment-number", _set("attributes.system.environment.N", 1), False, True, False),
    ("rfc14-cwd-relative", _set("attributes.system.cwd", "rel/dir"), False, True, False),
    ("rfc14-job-value-number", _set("attributes.system.job", {"name": 1}), False, True, False),
    # RFC 31 via fluxes.formats.constraints (the schema only wants an object).
    ("rfc31-unknown-operator", _set("attributes.system.constraints", {"colour": ["red"]}), False, True, False),
    # Stricter than both (documented): version >= 1, no unknown top-level keys, no nested slots.
    ("fluxes-version-0", _set("version", 0), False, True, False),
    ("fluxes-top-level-extra", _set("extra", 1), False, True, False),
    ("fluxes-nested-slot", _set("resources.0.with.0.with.0", {"type": "slot", "label": "x", "count": 1, "with": [{"type": "core", "count": 1}]}), False, True, False),
    # Not a difference: a slot deeper inside a slot (slot > node > slot) is valid, as flux-core says.
    ("rfc14-slot-node-slot", _set("resources.0.with.0.with", [{"type": "node", "count": 1, "with": [{"type": "slot", "label": "x", "count": 1, "with": [{"type": "core", "count": 1}]}]}]), False, True, True),
    # flux-core: an integer count of 0 is fine for types other than node, slot and core.
    ("flux-gpu-count-zero", _set("resources.0.with.0.with", [{"type": "core", "count": 1}, {"type": "gpu", "count": 0}]), False, False, True),
    ("flux-gpu-count-zero-v1", _set("resources.0.with.0.with", [{"type": "core", "count": 1}, {"type": "gpu", "count": 0}]), True, False, True),
    ("flux-core-count-zero", _set("resources.0.with.0.with.0.count", 0), False, False, False),
    # RFC 25 text: duration is required.
    ("rfc25-duration-required", _delete("attributes.system.duration"), True, True, False),
    # RFC 25 text: command is a list as in RFC 14 (the V1 schema allows a string).
    ("rfc25-command-string", _set("tasks.0.command", "app"), True, True, False),
    # RFC 25 text: exclusive only on node vertices (the V1 schema: only on slots).
    ("rfc25-exclusive-on-node", _set("resources.0.exclusive", True), True, False, True),
    ("rfc25-exclusive-on-slot", _set("resources.0.with.0.exclusive", False), True, True, False),
    # RFC 25 text: every vertex may have a label (the V1 schema: slots only).
    ("rfc25-label-on-core", _set("resources.0.with.0.with.0.label", "cores"), True, False, True),
    # RFC 25 text: the graph must contain a core.
    ("rfc25-slot-gpu-only", _set("resources.0.with.0.with", [{"type": "gpu", "count": 1}]), True, True, False),
    ("rfc25-slot-two-cores", _set("resources.0.with.0.with", [{"type": "core", "count": 1}, {"type": "core", "count": 1}]), True, True, False),
    # RFC 25 text: total >= node count.
    ("rfc25-total-below-nodes", _set("tasks.0.count", {"total": 2}), True, True, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("mutate", "v1", "theirs", "ours"),
    [pytest.param(m, v, t, o, id=i) for i, m, v, t, o in DIFFERENCES],
)
def test_known_differences_from_published_schemas(
    mutate: Callable[[dict[str, Any]], None], v1: bool, theirs: bool, ours: bool
) -> None:
    doc = _example()
    mutate(doc)
    validator = THEIRS25 if v1 else THEIRS14
    assert validator.is_valid(doc) is theirs
    assert ours_ok(doc, v1=v1) is ours


def test_slot_inside_a_node_inside_a_slot() -> None:
    # flux-core's use cases 1.10/1.11 shape: an outer slot (ssd + node) whose
    # node holds the task slot.
    spec = Jobspec.from_file(CASES / "valid" / "slot_in_node_in_slot.yaml")
    assert spec.warnings == []
    assert spec.nnodes == 3 * 2
    assert spec.nslots == 3 * 2 * 4  # task slots only, not the outer bb slots
    assert spec.ncores == 3 * 2 * 4 * 3
    assert spec.slot_size == 4 * 3  # an outer slot holds its inner slots' cores
    assert spec.resource_counts["slot"] == 3 * 2 + 3 * 2 * 4
    assert spec.exclusive


def test_slot_directly_inside_a_slot_is_still_refused() -> None:
    doc = _example()
    doc["resources"][0]["with"][0]["with"] = [
        {"type": "slot", "label": "inner", "count": 1, "with": [{"type": "core", "count": 1}]}]
    assert error_of(doc) == (
        "resources[0].with[0].with[0]: a slot cannot be directly inside another slot "
        "(resources[0].with[0]); put a resource such as a node between them"
    )


@pytest.mark.parametrize(("kind", "ok"), [("gpu", True), ("ssd", True), ("memory", True),
                                          ("core", False)])
def test_count_zero_only_outside_node_slot_core(kind: str, ok: bool) -> None:
    doc = _example()
    doc["resources"][0]["with"][0]["with"] = [
        {"type": "core", "count": 2}, {"type": kind, "count": 0}]
    assert ours_ok(doc) is ok
    assert ours_ok(doc, v1=True) is (kind == "gpu")
    if ok:
        spec = Jobspec.from_dict(doc)
        assert spec.resource_counts[kind] == 0


def test_v1_gpu_count_zero_reaches_the_scheduler_as_no_gpus() -> None:
    spec = Jobspec.from_file(CASES / "valid" / "gpu_count_zero_v1.yaml", v1=True)
    assert spec.ngpus == 0 and spec.gpus_per_slot == 0
    request = Request.from_jobspec(spec)
    assert (request.nnodes, request.nslots, request.slot_size, request.gpu_per_slot) == (
        2, 1, 4, 0)


def test_count_min_max_without_operator_is_refused_as_the_docs_say() -> None:
    doc = _example()
    doc["resources"][0]["count"] = {"min": 4, "max": 6}
    assert error_of(doc) == (
        "resources[0].count: max, operator and operand must be given together "
        "(missing operator, operand)"
    )
    doc["resources"][0]["count"] = "4-6"  # what the docs suggest instead
    assert Jobspec.from_dict(doc).resource_counts[doc["resources"][0]["type"]] == 4


def test_with_as_a_single_mapping_is_refused() -> None:
    # The RFC 14 text calls "with" a dictionary; its schema and all examples
    # use a list, which is what we (and the schema) accept.
    doc = _example()
    doc["resources"][0]["with"] = doc["resources"][0]["with"][0]
    assert not THEIRS14.is_valid(doc)
    assert error_of(doc) == (
        "resources[0].with: expected a list of resource vertices, got a mapping"
    )


def test_v1_total_may_exceed_slots() -> None:
    # RFC 25 says total <= the slot count, but its own use case 2.1 runs
    # 5 tasks in 4 slots; we follow the example (and RFC 14 "oversubscribed").
    jobspec = Jobspec.from_file(SPEC_DATA / "rfc25" / "use_case_2.1.yaml", v1=True)
    assert jobspec.tasks[0]["count"] == {"total": 5}
    assert jobspec.nslots == 4


# -- case directories ---------------------------------------------------------------------


def test_case_directories_are_populated() -> None:
    assert len(INVALID_CASES) >= 40
    assert len(VALID_CASES) >= 10
    for path in INVALID_CASES:
        assert "error" in header(path), path


@pytest.mark.parametrize("path", VALID_CASES, ids=lambda p: p.name)
def test_valid_cases(path: Path) -> None:
    meta = header(path)
    jobspec = Jobspec.from_file(path, v1=meta.get("v1") == "true")
    if "warning" in meta:
        assert any(meta["warning"] in w for w in jobspec.warnings), jobspec.warnings
    else:
        assert jobspec.warnings == []
    again = Jobspec.from_yaml(jobspec.dumps(), v1=jobspec.is_v1)
    assert again == jobspec


@pytest.mark.parametrize("path", INVALID_CASES, ids=lambda p: p.name)
def test_invalid_cases(path: Path) -> None:
    meta = header(path)
    with pytest.raises(JobspecError) as info:
        Jobspec.from_file(path, v1=meta.get("v1") == "true")
    message = str(info.value)
    assert meta["error"] in message
    assert "\n" not in message


@pytest.mark.parametrize("path", INVALID_CASES, ids=lambda p: p.name)
def test_invalid_cases_also_fail_from_dict(path: Path) -> None:
    # Same verdict whether the document arrives as YAML or as data (cases
    # that only break YAML-level rules cannot be expressed as data).
    meta = header(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, ValueError):
        return
    if not isinstance(data, dict) or "YAML" in meta["error"] or "yaml" in path.name:
        return
    with pytest.raises(JobspecError):
        Jobspec.from_dict(data, v1=meta.get("v1") == "true")


# -- hostile input --------------------------------------------------------------------------

BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- a\n- b\n", "jobspec must be a mapping, got a list"),
        ("just text", "jobspec must be a mapping, got a string"),
        ("", "jobspec must be a mapping, got null"),
        ("a: " + "x" * 10_000_000, "jobspec is larger than 1048576 bytes"),
        (b"a: " + b"x" * 10_000_000, "jobspec is larger than 1048576 bytes"),
        ("[" * 10_000 + "]" * 10_000, f"nested more than {MAX_DEPTH} levels deep"),
        ("{a: " * 10_000 + "}" * 10_000, f"nested more than {MAX_DEPTH} levels deep"),
        ("- " * 10_000 + "x\n", f"nested more than {MAX_DEPTH} levels deep"),
        ("[" * 500_000, f"nested more than {MAX_DEPTH} levels deep"),
        (BOMB, "aliases (*a) are not allowed"),
        (b"version: 1\nname: \xff\xfe\n", "not valid UTF-8"),
        (b"\xfe\xff\x00v\x00:", "not valid UTF-8"),
        ("a: \ud800", "not valid Unicode"),
        ("a: 1\n---\nb: 2\n", "single YAML document"),
        ("? [a, b]\n: 1\n", "is not a string"),
        ("1: a\n", "mapping key '1' (int)"),
        ("a: 2001-12-14\n", "reads as a date"),
        ("a: !!timestamp 2001-12-14\n", "reads as a date"),
        ("a: !!binary aGVsbG8=\n", "tag !!binary is not allowed"),
        ("a: !!set {x, y}\n", "tag !!set is not allowed"),
        ("a: !!omap [{x: 1}]\n", "tag !!omap is not allowed"),
        ("a: !!python/name:os.system\n", "is not allowed"),
        ("a: .nan\n", "not a finite number"),
        ("a: 1.0e+999\n", "not a finite number"),
        ("a: 123456789012345678901234567890\n", "integer out of range"),
        ("a: " + ":".join(["59"] * 5000) + "\n", "integer out of range"),
        ("a: [1, 2\n", "invalid YAML"),
        ("a: \x07\n", "invalid YAML"),
    ],
    ids=lambda v: repr(v)[:30] if isinstance(v, str | bytes) else None,
)
@pytest.mark.parametrize("loader", ["C", "pure"])
def test_hostile_yaml(
    text: str | bytes, fragment: str, loader: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our limits hold whatever YAML library parses: libyaml's own nesting
    # limit (PyYAML >= 6.0.2 wheels) must not pre-empt our message.
    if loader == "pure":
        monkeypatch.setattr(jobspec_yaml, "_Loader", yaml.SafeLoader)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML without libyaml")
    with pytest.raises(JobspecError) as info:
        Jobspec.from_yaml(text)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_size_limit_is_adjustable(tmp_path: Path) -> None:
    text = (SPEC_DATA / "rfc14" / "example1.yaml").read_text()
    with pytest.raises(JobspecError, match="larger than 100 bytes"):
        Jobspec.from_yaml(text, max_bytes=100)
    assert Jobspec.from_yaml(text, max_bytes=len(text.encode())).nnodes == 4
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * (MAX_JOBSPEC_BYTES + 10))
    with pytest.raises(JobspecError, match="larger than"):
        Jobspec.from_file(big)
    Jobspec.from_file(SPEC_DATA / "rfc14" / "example1.yaml", max_bytes=10_000)


def test_node_budget() -> None:
    env = ",".join(f"V{i}: x" for i in range(250_000))
    with pytest.raises(JobspecError, match="more than"):
        Jobspec.from_yaml("{" + env + "}", max_bytes=10 * MAX_JOBSPEC_BYTES)


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(JobspecError, match=r"missing\.yaml") as info:
        Jobspec.from_file(missing)
    # The message names the file once; the OSError is kept as the cause so
    # that callers printing "FILE: reason" can avoid naming it twice.
    assert str(info.value) == f"{missing}: No such file or directory"
    assert isinstance(info.value.__cause__, FileNotFoundError)
    with pytest.raises(JobspecError):
        Jobspec.from_file(tmp_path)


def test_utf8_bom_and_unicode_are_fine() -> None:
    text = (SPEC_DATA / "rfc14" / "example1.yaml").read_text().replace("app", "äpp-ƒ")
    jobspec = Jobspec.from_yaml(b"\xef\xbb\xbf" + text.encode())
    assert jobspec.command == ["äpp-ƒ"]
    assert Jobspec.from_yaml(jobspec.dumps()) == jobspec


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([1], "jobspec must be a mapping, got a list"),
        ({1: "a"}, "mapping key 1 is not a string"),
        ({"a": (1, 2)}, "a: tuple is not a JSON value"),
        ({"a": {1, 2}}, "a: set is not a JSON value"),
        ({"a": b"x"}, "a: bytes is not a JSON value"),
        ({"a": [math.nan]}, "a[0]: nan is not a finite number"),
        ({"a": math.inf}, "a: inf is not a finite number"),
        ({"a": 2**70}, "a: integer out of range"),
        ({"a": "\udc80"}, "a: string is not valid Unicode"),
        ({"a": object()}, "is not a JSON value"),
    ],
)
def test_from_dict_non_json(value: Any, fragment: str) -> None:
    with pytest.raises(JobspecError) as info:
        Jobspec.from_dict(value)
    assert fragment in str(info.value)


def test_from_dict_deep_and_cyclic() -> None:
    deep: list[Any] = []
    node = deep
    for _ in range(10_000):
        node.append([])
        node = node[0]
    with pytest.raises(JobspecError, match="nested more than"):
        Jobspec.from_dict({"a": deep})
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(JobspecError, match="nested more than"):
        Jobspec.from_dict(cyclic)
    shared: list[Any] = ["x"] * 100
    for _ in range(6):
        shared = [shared] * 100  # 10^14 values if expanded
    with pytest.raises(JobspecError, match="more than"):
        Jobspec.from_dict({"a": shared})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_text(text: str) -> None:
    with contextlib.suppress(JobspecError):
        Jobspec.from_yaml(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_bytes(data: bytes) -> None:
    with contextlib.suppress(JobspecError):
        Jobspec.from_yaml(data)


_YAML_PIECES = st.sampled_from(
    ["-", " ", "\n", "  ", ":", "[", "]", "{", "}", ",", "&a", "*a", "!!str", "!!set", "!x",
     "'", '"', "#", "---", "...", "?", "|", ">", "1", "1.5", "yes", "~", "2001-01-01", "<<",
     "version", "resources", "tasks", "attributes", "count", "type", "slot", "with", "=", "\t"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(_YAML_PIECES, max_size=60).map("".join))
def test_fuzz_yaml_like_text(text: str) -> None:
    with contextlib.suppress(JobspecError):
        Jobspec.from_yaml(text)


# -- fast path agrees with jsonschema --------------------------------------------------------

_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(-2, 40, allow_nan=False),
    st.sampled_from(["", "slot", "core", "node", "gpu", "+", "*", "^", "/abs", "rel", "in", "user",
                     "string", "fluid", "afterok", "1-4", "A=B", "per_slot", "total", "label"]),
)  # fmt: skip
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(["type", "count", "min", "max", "with", "label", "x", "per_slot",
                             "scheme", "value", "type", "scope", "environment", "PATH"]),
            children,
            max_size=3,
        ),
    ),
    max_leaves=8,
)  # fmt: skip

SEED_DOCS = [load_spec(p) for p in RFC14_FILES + RFC25_FILES] + [
    Jobspec.from_file(p).to_dict() for p in VALID_CASES
]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _paths(value, (*prefix, i))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    """A valid jobspec with one to three random edits."""
    doc = copy.deepcopy(draw(st.sampled_from(SEED_DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            continue
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(_JSON)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["x", "label", "with", "exclusive", "unit", "id", "queue",
                                         "cwd", "job", "user", "total", "max", "operator"]))] = draw(_JSON)
        else:
            parent.append(draw(_JSON))
    return doc


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_docs())
def test_fast_path_never_accepts_what_the_schema_refuses(doc: Any) -> None:
    if jobspec_rules._fast_ok(doc):
        assert jobspec_rules.validator().is_valid(doc)


@settings(max_examples=500, deadline=None)
@given(mutated_docs())
def test_mutated_docs_only_raise_jobspec_error(doc: Any) -> None:
    try:
        Jobspec.from_dict(doc)
        Jobspec.from_dict(doc, v1=True)
    except JobspecError as exc:
        assert "\n" not in str(exc)


def test_fast_path_accepts_the_examples() -> None:
    for doc in SEED_DOCS:
        assert jobspec_rules._fast_ok(doc)


# -- from_command ------------------------------------------------------------------------------


@pytest.mark.parametrize("nnodes", [None, 1, 2, 3])
@pytest.mark.parametrize("ntasks", [1, 3, 4, 8])
@pytest.mark.parametrize("cores", [1, 2])
@pytest.mark.parametrize("gpus", [None, 0, 1, 2])
@pytest.mark.parametrize("exclusive", [False, True])
def test_from_command_shapes(
    nnodes: int | None, ntasks: int, cores: int, gpus: int | None, exclusive: bool
) -> None:
    kwargs: dict[str, Any] = {
        "nnodes": nnodes,
        "ntasks": ntasks,
        "cores_per_task": cores,
        "gpus_per_task": gpus,
        "exclusive": exclusive,
    }
    if (nnodes is None and exclusive) or (nnodes is not None and nnodes > ntasks):
        with pytest.raises(JobspecError):
            Jobspec.from_command(["app"], **kwargs)
        return
    js = Jobspec.from_command(["app", "arg"], **kwargs)
    assert js.is_v1 and js.version == 1
    Jobspec.from_dict(js.to_dict(), v1=True)
    assert THEIRS14.is_valid(js.to_dict())
    per_node = -(-ntasks // nnodes) if nnodes else ntasks
    nslots = per_node * (nnodes or 1)
    assert js.nnodes == (nnodes or 0)
    assert js.nslots == nslots
    assert js.slot_size == cores
    assert js.gpus_per_slot == (gpus or 0)
    assert js.ncores == nslots * cores
    assert js.ngpus == nslots * (gpus or 0)
    assert js.exclusive is exclusive
    top = js.resources[0]
    slot = top["with"][0] if nnodes else top
    assert top["type"] == ("node" if nnodes else "slot")
    assert ("exclusive" in top) is exclusive
    assert slot == {
        "type": "slot",
        "count": per_node,
        "label": "task",
        "with": [{"type": "core", "count": cores}] + ([{"type": "gpu", "count": gpus}] if gpus else []),
    }
    even = nnodes is None or ntasks % nnodes == 0
    assert js.tasks == [
        {"command": ["app", "arg"], "slot": "task", "count": {"per_slot": 1} if even else {"total": ntasks}}
    ]
    assert js.attributes == {"system": {"duration": 0.0, "environment": {}}}
    assert js.duration == 0.0 and js.name == "app"


def test_from_command_matches_flux_layout() -> None:
    js = Jobspec.from_command(["hostname"], nnodes=2, ntasks=5, cores_per_task=2)
    assert js.to_dict() == {
        "resources": [
            {
                "type": "node",
                "count": 2,
                "with": [
                    {"type": "slot", "count": 3, "label": "task", "with": [{"type": "core", "count": 2}]}
                ],
            }
        ],
        "tasks": [{"command": ["hostname"], "slot": "task", "count": {"total": 5}}],
        "attributes": {"system": {"duration": 0.0, "environment": {}}},
        "version": 1,
    }
    assert list(orjson.loads(js.dumps())) == ["resources", "tasks", "attributes", "version"]


def test_from_command_attributes() -> None:
    js = Jobspec.from_command(
        ["/usr/bin/python3", "x.py"],
        ntasks=2,
        duration="1.5h",
        queue="debug",
        name="sim",
        cwd="/scratch",
        environment={"A": "1", "B": None},
        constraints={"properties": ["ssd"]},
        dependencies=["afterok:ƒ2oLkTLb", {"scheme": "afterany", "value": "12"},
                      "string:foo?type=in&scope=user"],
        output="out.{{id}}",
        error="err.txt",
        attributes={"user": {"tag": 7}, "system": {"bank": "b", "duration": 9}},
    )  # fmt: skip
    assert js.duration == 5400.0
    assert (js.queue, js.name, js.cwd) == ("debug", "sim", "/scratch")
    assert js.environment == {"A": "1", "B": None}
    assert js.constraints == {"properties": ["ssd"]}
    assert js.dependencies == [
        {"scheme": "afterok", "value": "ƒ2oLkTLb"},
        {"scheme": "afterany", "value": "12"},
        {"scheme": "string", "value": "foo", "type": "in", "scope": "user"},
    ]
    system = js.attributes["system"]
    assert system["shell"]["options"]["output"] == {
        "stdout": {"type": "file", "path": "out.{{id}}"},
        "stderr": {"type": "file", "path": "err.txt"},
    }
    assert system["bank"] == "b"
    assert js.attributes["user"] == {"tag": 7}
    assert js.warnings == []
    assert Jobspec.from_command(["/bin/true"]).name == "true"
    # Explicit arguments win over attributes, but 0 (unset) and None do not.
    merged = Jobspec.from_command(
        ["a"], attributes={"system": {"duration": 9, "environment": {"X": "1"}, "queue": "q"}}
    )
    assert (merged.duration, merged.environment, merged.queue) == (9, {"X": "1"}, "q")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"command": []}, "command: expected a non-empty list"),
        ({"command": "hostname"}, "command: expected a non-empty list"),
        ({"command": ["a", 1]}, "command[1]: expected a string"),
        ({"ntasks": 0}, "ntasks: must be an integer >= 1"),
        ({"ntasks": True}, "ntasks: must be an integer >= 1"),
        ({"cores_per_task": 0}, "cores_per_task: must be an integer >= 1"),
        ({"gpus_per_task": -1}, "gpus_per_task: must be an integer >= 0"),
        ({"nnodes": 0}, "nnodes: must be an integer >= 1"),
        ({"nnodes": 2, "ntasks": 1}, "nnodes: 2 nodes is more than ntasks (1)"),
        ({"exclusive": True}, "exclusive: needs nnodes"),
        ({"duration": -1}, "duration:"),
        ({"duration": "soon"}, "duration: invalid duration 'soon'"),
        ({"duration": "inf"}, "duration: must be finite"),
        ({"cwd": "relative"}, "attributes.system.cwd: must be an absolute path"),
        ({"queue": ""}, "attributes.system.queue: must not be empty"),
        ({"environment": ["A=1"]}, "environment: expected a mapping"),
        ({"environment": {"A": 1}}, "attributes.system.environment.A: expected a string or null"),
        ({"constraints": {"bogus": []}}, "attributes.system.constraints: unknown operator 'bogus'"),
        ({"dependencies": ["afterok"]}, "dependency 'afterok': expected scheme:value"),
        ({"dependencies": ["afterok:"]}, "dependency 'afterok:': expected scheme:value"),
        ({"dependencies": ["afterok:notanid"]}, "attributes.system.dependencies[0].value: invalid job id"),
        ({"dependencies": "afterok:12"}, "dependencies: expected a list"),
        ({"attributes": {"system": 1}}, "attributes.system: expected a mapping"),
        ({"attributes": {"other": {}}}, "attributes: unknown key 'other'"),
        ({"name": 3}, "attributes.system.job.name: expected a string"),
    ],
)
def test_from_command_errors(kwargs: dict[str, Any], fragment: str) -> None:
    command = kwargs.pop("command", ["app"])
    with pytest.raises(JobspecError) as info:
        Jobspec.from_command(command, **kwargs)
    assert fragment in str(info.value)


def test_parse_dependency() -> None:
    assert parse_dependency("afterany:f1") == {"scheme": "afterany", "value": "f1"}
    assert parse_dependency("string:a%20b?type=out;scope=global&x=%3D") == {
        "scheme": "string",
        "value": "a%20b",
        "type": "out",
        "scope": "global",
        "x": "=",
    }
    for bad in ["", "x", ":v", "s:", "s:v?", "s:v?k", "s:v?=1", "s:v?scheme=x"]:
        if bad == "s:v?":
            assert parse_dependency(bad) == {"scheme": "s", "value": "v"}
            continue
        with pytest.raises(JobspecError):
            parse_dependency(bad)


def test_from_command_urgency_is_a_submission_default() -> None:
    plain = Jobspec.from_command(["app"])
    assert plain.urgency is None
    held = Jobspec.from_command(["app"], urgency=0)
    assert held.urgency == 0
    js = Jobspec.from_command(["app"], urgency=31, duration=60)
    assert js.urgency == 31
    # Not an RFC 14 attribute: the document is the same with or without it.
    assert js.to_dict() == Jobspec.from_command(["app"], duration=60).to_dict()
    assert "urgency" not in js.dumps()
    assert js == Jobspec.from_command(["app"], duration=60)
    assert js.is_v1
    # Derived copies keep it.
    assert js.with_system_defaults(duration=5, queue="batch").urgency == 31
    assert js.add_required_properties(["ssd"]).urgency == 31
    assert Jobspec.from_dict(js.to_dict()).urgency is None


@pytest.mark.parametrize("bad", [-1, 32, 100, True, False, 1.0, "5", [5]])
def test_from_command_urgency_bad(bad: object) -> None:
    with pytest.raises(JobspecError, match=r"^urgency: must be an integer 0-31, got "):
        Jobspec.from_command(["app"], urgency=bad)  # type: ignore[arg-type]


def test_urgency_property_is_read_only() -> None:
    js = Jobspec.from_command(["app"], urgency=3)
    with pytest.raises(AttributeError):
        js.urgency = 4  # type: ignore[misc]


def test_deep_paths_are_shortened_in_messages() -> None:
    # Thirty levels of resources and a bad count at the bottom: the message
    # keeps the head and the exact place, on one readable line.
    vertex: dict[str, Any] = {"type": "core", "count": 0}
    for _ in range(28):
        vertex = {"type": "x", "count": 1, "with": [vertex]}
    doc = _example()
    doc["resources"][0]["with"][0]["with"] = [vertex]
    message = error_of(doc)
    assert message == "resources[0].with[0]...with[0].with[0].with[0].count: must be >= 1, got 0"
    vertex = {"type": "core", "count": {"min": 3, "max": 2, "operator": "+", "operand": 1}}
    for _ in range(28):
        vertex = {"type": "x", "count": 1, "with": [vertex]}
    doc["resources"][0]["with"][0]["with"] = [vertex]
    assert error_of(doc) == (
        "resources[0].with[0]...with[0].with[0].with[0].count: max (2) is less than min (3)"
    )
    # Shallow paths are written out in full.
    doc = _example()
    doc["resources"][0]["with"][0]["with"][0]["count"] = 0
    assert error_of(doc).startswith("resources[0].with[0].with[0].count: ")


def test_deep_constraint_path_is_shortened_in_a_jobspec() -> None:
    constraint: dict[str, Any] = {"properties": ["ok", "a&b"]}
    for _ in range(25):
        constraint = {"not": [constraint]}
    message = error_of({**_example(), "attributes": {"system": {"constraints": constraint}}})
    assert message.startswith("attributes.system.constraints.not[0].not[0]...not[0]")
    assert ".properties[1]: invalid character '&'" in message
    assert len(message) < 150 and "\n" not in message


def test_format_path_shortens_deep_paths() -> None:
    from fluxes.formats.jobspec_rules import format_path, join_path

    assert format_path(["resources", 0, "with", 1]) == "resources[0].with[1]"
    deep: list[str | int] = ["resources", 0]
    for _ in range(20):
        deep += ["with", 0]
    assert format_path([*deep, "count"]) == "resources[0].with[0]...with[0].with[0].with[0].count"
    # an index is never separated from its key
    assert format_path(deep) == "resources[0].with[0]...with[0].with[0].with[0].with[0]"
    pieces = ["a", *(f".k{i}" for i in range(30))]
    assert join_path(pieces) == "a.k0.k1.k2...k23.k24.k25.k26.k27.k28.k29"


# -- helpers for ingest --------------------------------------------------------------------------


def test_with_system_defaults() -> None:
    js = Jobspec.from_command(["app"])
    out = js.with_system_defaults(duration=60.0, queue="batch")
    assert (out.duration, out.queue) == (60.0, "batch")
    assert (js.duration, js.queue) == (0.0, None)  # the original is unchanged
    assert out.is_v1
    kept = Jobspec.from_command(["app"], duration=5, queue="debug").with_system_defaults(60, "batch")
    assert (kept.duration, kept.queue) == (5.0, "debug")
    same = js.with_system_defaults()
    assert same == js and same is not js
    no_system = Jobspec.from_dict({**_example(), "attributes": {}})
    assert no_system.with_system_defaults(duration=1).duration == 1.0
    with pytest.raises(JobspecError, match=r"attributes\.system\.duration: must be >= 0"):
        js.with_system_defaults(duration=-1)
    with pytest.raises(JobspecError, match=r"attributes\.system\.queue"):
        js.with_system_defaults(queue=3)  # type: ignore[arg-type]


def test_add_required_properties() -> None:
    js = Jobspec.from_command(["app"])
    assert js.add_required_properties(["ssd"]).constraints == {"properties": ["ssd"]}
    assert js.add_required_properties([]).constraints is None
    props = Jobspec.from_command(["app"], constraints={"properties": ["a"]})
    assert props.add_required_properties(["b", "a"]).constraints == {"properties": ["a", "b"]}
    other = Jobspec.from_command(["app"], constraints={"hostlist": ["n[1-2]"]})
    assert other.add_required_properties(["b"]).constraints == {
        "and": [{"hostlist": ["n[1-2]"]}, {"properties": ["b"]}]
    }
    with pytest.raises(JobspecError, match=r"attributes\.system\.constraints"):
        js.add_required_properties([3])  # type: ignore[list-item]


# -- API details ---------------------------------------------------------------------------------


def test_to_dict_and_properties_are_copies() -> None:
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "use_case_2.7.yaml")
    doc = js.to_dict()
    doc["tasks"][0]["command"].append("x")
    js.resources[0]["count"] = 99
    js.tasks[0]["slot"] = "nope"
    js.attributes["system"]["duration"] = 1
    env = js.environment
    assert env is not None
    env["X"] = "y"
    js.command.append("more")
    assert js.to_dict() == load_spec(SPEC_DATA / "rfc14" / "use_case_2.7.yaml")


def test_from_dict_copies_its_input() -> None:
    doc = _example()
    js = Jobspec.from_dict(doc)
    doc["resources"][0]["count"] = 0
    assert js.nnodes == 4


def test_dumps_is_compact_json() -> None:
    js = Jobspec.from_file(SPEC_DATA / "rfc14" / "example1.yaml")
    text = js.dumps()
    assert ": " not in text and ", " not in text
    assert json.loads(text) == js.to_dict()
    assert Jobspec.from_yaml(text) == js
    assert js != Jobspec.from_file(SPEC_DATA / "rfc14" / "example2.yaml")
    assert "nnodes=4" in repr(js)


def test_name_and_warnings() -> None:
    doc = _example()
    doc["attributes"]["system"]["job"] = {"name": "custom"}
    doc["attributes"]["system"]["frobnicate"] = True
    doc["tasks"][0]["command"] = ["/opt/bin/solver", "-v"]
    js = Jobspec.from_dict(doc)
    assert js.name == "custom"
    assert js.warnings == [
        "attributes.system.frobnicate: unknown system attribute (kept, not interpreted)"
    ]
    del doc["attributes"]["system"]["job"]
    assert Jobspec.from_dict(doc).name == "solver"


def test_error_paths_quote_odd_keys() -> None:
    doc = _example()
    doc["attributes"]["system"]["job"] = {"a.b c": 1}
    assert error_of(doc) == 'attributes.system.job["a.b c"]: expected a string, got an integer'


def test_schema_messages_without_fast_path() -> None:
    doc = _example()
    doc["tasks"][0]["command"] = "app"
    with pytest.raises(JobspecError, match=r"^tasks\[0\]\.command: expected a list of strings"):
        jobspec_rules.check_schema(doc, fast=False)
    jobspec_rules.check_schema(_example(), fast=False)
