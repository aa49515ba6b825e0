"""Fuzz every parser of user or admin text: garbage in, a clean one-line ValueError out.

For each parser the property is the same: any input either parses (and then
round-trips where the format has an encoder) or raises ValueError (or a
subclass) with a one-line message; never another exception, never a hang.
Inputs mix grammar-aware text (the characters each format cares about),
arbitrary unicode, and valid documents with a few values mutated.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from fluxes.config import InstanceConfig
from fluxes.domain.jm import depend
from fluxes.domain.jm.queues import QueueConfig
from fluxes.domain.sched.inventory import Inventory
from fluxes.errors import ConfigError, JobspecError, PolicyError
from fluxes.formats import constraints, fsd, jobid
from fluxes.formats.counts import Count
from fluxes.formats.hostlist import Hostlist
from fluxes.formats.idset import IDSet
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.requires import parse_requires
from fluxes.formats.rset import ResourceSet
from tests.fuzz import (
    EDGE_INTS,
    FLOATS,
    fuzz_settings,
    grammar_text,
    json_values,
    mutated,
    outcome,
)

DATA = Path(__file__).resolve().parent.parent
VALID_JOBSPECS = sorted((DATA / "spec-data" / "rfc14").glob("*.yaml")) \
    + sorted((DATA / "spec-data" / "rfc25").glob("*.yaml")) \
    + sorted((DATA / "cases" / "jobspec" / "valid").glob("*.yaml"))
JOBSPEC_DOCS = [Jobspec.from_yaml(p.read_text()).to_dict() for p in VALID_JOBSPECS]
VALID_CONSTRAINTS = [json.loads(p.read_text())
                     for p in sorted((DATA / "cases" / "constraints" / "valid").glob("*.json"))]
R_EXAMPLE = json.loads((DATA / "spec-data" / "rfc20" / "example1.json").read_text())
R_EXAMPLES = [
    R_EXAMPLE,
    {"version": 1, "execution": {
        "R_lite": [{"rank": "0-3", "children": {"core": "0-7"}},
                   {"rank": "4", "children": {"core": "0-1", "gpu": "0"}}],
        "nodelist": ["n[0-4]"], "properties": {"gpu": "4", "big": "0-1"},
        "starttime": 0, "expiration": 0}},
]


def _big_numbers() -> st.SearchStrategy[str]:
    """Decimal strings around and far beyond the 32/64-bit limits."""
    return st.one_of(
        st.integers(0, 2**70).map(str),
        st.integers(1, 5000).map(lambda n: "9" * n),
        st.integers(1, 500).map(lambda n: "0" * n + "1"),
    )


# -- RFC 22 idsets -------------------------------------------------------------------


@st.composite
def idset_text(draw: st.DrawFn) -> str:
    """Idset-like strings: runs of numbers joined by the grammar's punctuation."""
    parts = draw(st.lists(st.one_of(_big_numbers(), st.integers(0, 50).map(str),
                                    grammar_text("0123456789-", 8)), max_size=12))
    seps = st.sampled_from([",", "-", ",", ",,", " ", "[", "]", ""])
    text = "".join(p + draw(seps) for p in parts)
    if draw(st.booleans()):
        text = f"[{text}]"
    return text


@fuzz_settings()
@given(st.one_of(idset_text(), grammar_text("0123456789,-[]")))
@example("0-4294967294")
@example("[" + ",".join(map(str, range(0, 20000, 2))) + "]")
@example("4294967295")
def test_idset_text(text: str) -> None:
    """IDSet(text) parses and round-trips, or raises a clean ValueError."""
    result = outcome(IDSet, text)
    if isinstance(result, IDSet):
        again = IDSet(str(result))
        assert again == result
        assert len(again) == len(result)


@fuzz_settings()
@given(st.one_of(json_values(10, big_ints=True), st.lists(EDGE_INTS, max_size=20),
                 st.lists(st.one_of(st.integers(-5, 2**33), st.booleans(), FLOATS), max_size=20)))
def test_idset_objects(value: Any) -> None:
    """IDSet(any object) builds a set or raises a clean ValueError."""
    result = outcome(IDSet, value)
    if isinstance(result, IDSet):
        assert IDSet(str(result)) == result


# -- RFC 29 hostlists ----------------------------------------------------------------


@st.composite
def hostlist_text(draw: st.DrawFn) -> str:
    """Hostlist-like strings: prefixes, bracketed idlists, suffixes, commas."""
    out = []
    for _ in range(draw(st.integers(0, 6))):
        prefix = draw(st.text(alphabet="abnode-_.01", max_size=6))
        if draw(st.booleans()):
            ids = draw(idset_text()).strip("[]")
            suffix = draw(st.text(alphabet="ab-0", max_size=3))
            out.append(f"{prefix}[{ids}]{suffix}")
        else:
            out.append(prefix + draw(st.one_of(st.just(""), _big_numbers())))
    return draw(st.sampled_from([",", ",,", "[", "]", " "])).join(out) if out else ""


@fuzz_settings()
@given(st.one_of(hostlist_text(), grammar_text("abn0123456789,-[]")))
@example("n[0-1048576]")
@example("n[0-1048575]")
@example("n" + "[0-9]" * 10)
@example(",".join(f"h{i}x" for i in range(5000)))
@example("n[" + "0" * 70 + "1]")
def test_hostlist_text(text: str) -> None:
    """Hostlist(text) parses and round-trips, or raises a clean ValueError."""
    result = outcome(Hostlist, text)
    if isinstance(result, Hostlist):
        encoded = str(result)
        again = Hostlist(encoded)
        assert again == result
        assert len(again) == len(result)


@fuzz_settings()
@given(st.one_of(json_values(10), st.lists(grammar_text(max_size=10), max_size=20)))
def test_hostlist_objects(value: Any) -> None:
    """Hostlist(any object) builds a list or raises a clean ValueError."""
    result = outcome(Hostlist, value)
    if isinstance(result, Hostlist):
        assert Hostlist(str(result)) == result


# -- RFC 23 durations ----------------------------------------------------------------


@st.composite
def fsd_text(draw: st.DrawFn) -> str:
    """Duration-like strings: strtod-style numbers with units."""
    number = draw(st.one_of(
        FLOATS.map(repr), _big_numbers(), st.integers(0, 10**6).map(hex),
        st.sampled_from(["inf", "INFINITY", "nan", "nan(x)", "0x1p1024", "1e309", ".", "0x",
                         "0x.p1", "1e", "-0", "+1", "1.5e-400"]),
    ))
    unit = draw(st.sampled_from(["", "", "ms", "s", "m", "h", "d", "x", " s", "mm", "\n"]))
    return number + unit


@fuzz_settings()
@given(st.one_of(fsd_text(), grammar_text("0123456789.eExXpP+-msdhinfa ")))
@example("9" * 5000)
@example("0x" + "f" * 5000)
def test_parse_duration_text(text: str) -> None:
    """parse_duration(text) gives a number >= 0 (or inf) or a clean ValueError."""
    result = outcome(fsd.parse_duration, text)
    if not isinstance(result, ValueError):
        assert result >= 0 and not math.isnan(result)
        if math.isfinite(result):
            assert fsd.parse_duration(fsd.format_duration(result)) == pytest.approx(
                result, rel=1e-5)


@fuzz_settings()
@given(st.one_of(json_values(5, big_ints=True, nonfinite=True),
                 st.integers(-(2**2000), 2**2000)))
def test_parse_duration_objects(value: Any) -> None:
    """parse_duration(any object) gives a number or a clean ValueError."""
    outcome(fsd.parse_duration, value)


# -- RFC 14 counts -------------------------------------------------------------------


@st.composite
def count_text(draw: st.DrawFn) -> str:
    """Range and idset count strings: min-max:operand:operator and friends."""
    nums = st.one_of(st.integers(0, 70).map(str), _big_numbers())
    text = draw(nums) + draw(st.sampled_from(["-", "+", "", ","]))
    if draw(st.booleans()):
        text += draw(nums)
    for _ in range(draw(st.integers(0, 2))):
        text += ":" + draw(st.one_of(nums, st.sampled_from(["+", "*", "^", "x", ""])))
    if draw(st.booleans()):
        text = f"[{text}]"
    return text


@fuzz_settings()
@given(st.one_of(count_text(), grammar_text("0123456789-+:*^[],")))
@example("2+:4294967294:^")
@example("2-4294967294:2:^")
@example("1-4294967294:1:+")
def test_count_text(text: str) -> None:
    """Count.decode(text) round-trips or raises a clean ValueError; queries stay fast."""
    result = outcome(Count.decode, text)
    if isinstance(result, Count):
        assert Count.decode(result.encode()) == result
        outcome(result.largest_at_most, 2**32)
        outcome(lambda: list(result.values(limit=1000))[:5])
        outcome(result.__contains__, 2**31)


@fuzz_settings()
@given(st.one_of(
    json_values(10, big_ints=True),
    st.fixed_dictionaries({}, optional={
        "min": st.one_of(EDGE_INTS, json_values(2)), "max": st.one_of(EDGE_INTS, json_values(2)),
        "operator": st.sampled_from(["+", "*", "^", "", "-", None]),
        "operand": st.one_of(EDGE_INTS, json_values(2))}),
))
def test_count_objects(value: Any) -> None:
    """Count.decode(any object) gives a count or a clean ValueError."""
    result = outcome(Count.decode, value)
    if isinstance(result, Count):
        assert Count.decode(result.encode()) == result
        outcome(result.largest_at_most, 2**40)


# -- RFC 19 job ids ------------------------------------------------------------------


@st.composite
def jobid_text(draw: st.DrawFn) -> str:
    """Encodings of random ids (valid), then maybe damaged."""
    value = draw(st.one_of(st.integers(0, 2**64 - 1), EDGE_INTS.filter(lambda n: n >= 0)))
    text = jobid.encode(value, draw(st.sampled_from([*jobid.FORMS, "f58plain"])))
    if draw(st.booleans()):
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + draw(grammar_text(max_size=4)) + text[pos + 1:]
    return text


@fuzz_settings()
@given(st.one_of(jobid_text(), grammar_text("0123456789abcdefx.-ƒfjob "),
                 _big_numbers(), st.text(max_size=80)))
@example("job." * 1000)
@example("-".join(["cake"] * 5000))
def test_jobid_parse(text: str) -> None:
    """jobid.parse(text) gives a 64-bit id that re-encodes, or a clean ValueError."""
    result = outcome(jobid.parse, text)
    if not isinstance(result, ValueError):
        assert 0 <= result <= jobid.MAX_ID
        for form in jobid.FORMS:
            assert jobid.parse(jobid.encode(result, form)) == result


@fuzz_settings(0.5)
@given(json_values(5, big_ints=True))
def test_jobid_objects(value: Any) -> None:
    """jobid.parse/encode of any object: a result or a clean ValueError."""
    outcome(jobid.parse, value)
    outcome(jobid.encode, value)


# -- RFC 31 constraints and --requires -----------------------------------------------


def _constraint_values() -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.fixed_dictionaries({"properties": st.lists(
            st.one_of(grammar_text("abc^!&|", 6), st.just("^"), json_values(1)), max_size=4)}),
        st.fixed_dictionaries({"hostlist": st.lists(
            st.one_of(hostlist_text(), json_values(1)), max_size=3)}),
        st.fixed_dictionaries({"ranks": st.lists(
            st.one_of(idset_text(), json_values(1)), max_size=3)}),
        json_values(3),
    )
    return st.recursive(leaf, lambda inner: st.builds(
        lambda op, args: {op: args},
        st.sampled_from(["and", "or", "not", "nand"]),
        st.lists(inner, max_size=3),
    ), max_leaves=12)


@fuzz_settings()
@given(st.one_of(_constraint_values(),
                 st.sampled_from(VALID_CONSTRAINTS).flatmap(mutated)))
@example({"not": [{"not": [{}]}] * 2})
def test_constraints_parse(obj: Any) -> None:
    """constraints.parse(any object) gives a Constraint that round-trips, or ValueError."""
    result = outcome(constraints.parse, obj)
    if isinstance(result, constraints.Constraint):
        assert constraints.parse(result.to_dict()) == result
        outcome(result.match_ranks, ResourceSet(R_EXAMPLES[1]))


def _nested(depth: int) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for _ in range(depth):
        doc = {"not": [doc]}
    return doc


@fuzz_settings(0.5)
@given(st.one_of(st.binary(max_size=200), grammar_text('{}[]":,andornot', 80)))
@example(b"[" * 5000)
@example('{"not": [' * 900 + "{}" + "]}" * 900)
@example(orjson.dumps(_nested(100)))
def test_constraints_parse_text(text: str | bytes) -> None:
    """constraints.parse of JSON text: a Constraint or a clean ValueError."""
    outcome(constraints.parse, text)


@fuzz_settings()
@given(st.lists(grammar_text("abc:^-|! hostrankgpu0123[],", 30), max_size=4))
def test_parse_requires(exprs: list[str]) -> None:
    """parse_requires(strings) gives a constraint object or a clean ValueError."""
    result = outcome(parse_requires, exprs)
    if isinstance(result, dict):
        constraints.parse(result)


# -- RFC 26 dependencies -------------------------------------------------------------


@st.composite
def dependency_text(draw: st.DrawFn) -> str:
    """scheme:value?key=val&... strings."""
    scheme = draw(st.one_of(st.sampled_from([*depend.SCHEMES, "string", "fluid", ""]),
                            grammar_text(max_size=6)))
    value = draw(st.one_of(jobid_text(), fsd_text().map(lambda t: "+" + t), FLOATS.map(repr),
                           grammar_text(max_size=20)))
    text = f"{scheme}:{value}"
    if draw(st.booleans()):
        text += "?" + draw(grammar_text("ab=&;%20?", 20))
    return text


@fuzz_settings()
@given(st.one_of(dependency_text(), grammar_text(max_size=40)))
@example("begin-time:+1e308d")
@example("begin-time:" + "9" * 400)
@example("afterok:" + "9" * 5000)
def test_parse_dependency(text: str) -> None:
    """depend.parse_dependency(text) gives an RFC 26 object or a clean PolicyError."""
    result = outcome(depend.parse_dependency, text, now=1e9)
    if isinstance(result, ValueError):
        assert isinstance(result, PolicyError)
    else:
        depend.check_dependency(result)


@fuzz_settings(0.5)
@given(st.one_of(json_values(6), st.fixed_dictionaries(
    {"scheme": st.sampled_from([*depend.SCHEMES, "x"]),
     "value": st.one_of(jobid_text(), json_values(1))})))
def test_check_dependency(obj: Any) -> None:
    """depend.check_dependency(any object) gives a Dependency or a clean PolicyError."""
    result = outcome(depend.check_dependency, obj)
    assert isinstance(result, depend.Dependency | PolicyError)


# -- RFC 20 R ------------------------------------------------------------------------


@fuzz_settings()
@given(st.one_of(st.sampled_from(R_EXAMPLES).flatmap(
    lambda r: mutated(r, values=st.one_of(json_values(6), idset_text(), hostlist_text()))),
    json_values(10)))
@example({"version": 1, "execution": {"R_lite": [{"rank": "0-4294967294",
                                                   "children": {"core": "0"}}]}})
@example({"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}],
                                      "nodelist": ["n[0-1048575]"] * 4096}})
def test_rset(obj: Any) -> None:
    """ResourceSet(any object) decodes (and re-encodes identically) or raises ValueError."""
    result = outcome(ResourceSet, obj)
    if isinstance(result, ResourceSet):
        assert ResourceSet(result.encode()) == result
        result.summary()


@fuzz_settings(0.5)
@given(st.one_of(st.binary(max_size=200), st.sampled_from(R_EXAMPLES).flatmap(mutated).map(
    lambda r: json.dumps(r).encode())))
def test_rset_text(raw: bytes) -> None:
    """ResourceSet(JSON bytes) decodes or raises a clean ValueError."""
    outcome(ResourceSet, raw)


# -- TOML configuration --------------------------------------------------------------

_TOML_WORDS = [
    "policy", "queues", "resource", "ingest", "exec", "sched", "limits", "duration",
    "job-size", "max", "min", "nnodes", "ncores", "ngpus", "jobspec", "defaults", "system",
    "queue", "access", "allow-user", "allow-group", "scheduler", "queue-depth",
    "reservation-depth", "placement", "requires", "config", "hosts", "cores", "gpus",
    "properties", "memory", "sockets", "path", "kill-timeout", "mode", "limit",
    "max-jobspec-bytes", "max-jobs-per-request", "max-tasks", "max-command-bytes",
    "max-environment-bytes", "batch", "debug", "x\ny", "a.b", "",
]
_TOML_VALUES = st.one_of(
    st.sampled_from(["10m", "inf", "0", "-1s", "node[0-3]", "n[0-1048575]", "0-3", "0-4294967294",
                     "fcfs", "easy", "best-fit", "single", "limited", "256G", "1.5T", "-1G",
                     "batch", "^login", "a b", "", "\n", "1e309"]),
    EDGE_INTS, st.integers(-(2**70), 2**70), FLOATS,
    st.sampled_from([math.inf, -math.inf, math.nan]), st.booleans(),
    grammar_text(max_size=12),
)


def _toml_key(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key):
        return key
    return json.dumps(key, ensure_ascii=False)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return '"?"'


def _toml_tree() -> st.SearchStrategy[Any]:
    return st.recursive(
        _TOML_VALUES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(_TOML_WORDS), inner, max_size=4),
        ),
        max_leaves=15,
    )


@st.composite
def toml_text(draw: st.DrawFn) -> str:
    """A TOML document over the configuration's vocabulary (some of it invalid TOML)."""
    lines: list[str] = []
    top = draw(st.dictionaries(st.sampled_from(_TOML_WORDS), _toml_tree(), max_size=5))
    for key, value in top.items():
        if isinstance(value, dict) and draw(st.booleans()):
            lines.append(f"[{_toml_key(key)}]")
            lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                lines.append(f"[[{_toml_key(key)}]]")
                lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in item.items()]
        else:
            lines.insert(0, f"{_toml_key(key)} = {_toml_value(value)}")
    if draw(st.integers(0, 9)) == 0:
        lines.append(draw(grammar_text('[]="{}.,#\n', 30)))
    return "\n".join(lines) + "\n"


@st.composite
def resource_toml(draw: st.DrawFn) -> str:
    """``[[resource.config]]`` entries with plausible and hostile values."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        out.append("[[resource.config]]")
        entry = draw(st.fixed_dictionaries({}, optional={
            "hosts": st.one_of(hostlist_text(), _TOML_VALUES),
            "cores": st.one_of(idset_text(), _TOML_VALUES),
            "gpus": st.one_of(idset_text(), _TOML_VALUES),
            "properties": st.lists(st.one_of(grammar_text("ab^!", 5), _TOML_VALUES), max_size=3),
            "memory": _TOML_VALUES,
            "sockets": st.one_of(st.integers(-1, 64), _TOML_VALUES),
        }))
        out += [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(out) + "\n"


SAMPLE_CONFIG = """\
[policy]
jobspec.defaults.system.duration = "1h"
jobspec.defaults.system.queue = "batch"
limits.duration = "1d"

[queues.batch]
requires = ["batch"]
[queues.debug]
policy.limits.job-size.max.nnodes = 2

[ingest]
max-tasks = 1000

[exec]
kill-timeout = "10s"

[sched]
mode = "limited"
limit = 8

[[resource.config]]
hosts = "n[0-7]"
cores = "0-31"
sockets = 2
properties = ["batch"]
"""


def _mutated_text(text: str) -> st.SearchStrategy[str]:
    @st.composite
    def build(draw: st.DrawFn) -> str:
        out = text
        for _ in range(draw(st.integers(1, 3))):
            pos = draw(st.integers(0, len(out)))
            cut = draw(st.integers(0, 5))
            out = out[:pos] + draw(grammar_text(max_size=6)) + out[pos + cut:]
        return out
    return build()


CONFIG_TEXTS = st.one_of(toml_text(), resource_toml(), _mutated_text(SAMPLE_CONFIG),
                         grammar_text('[]="{}.,#\n ab', 80))


@fuzz_settings()
@given(CONFIG_TEXTS)
@example('"x\\ny" = 1\n')
@example("[ingest]\nmax-tasks = 99999999999999999999999999\n")
@example("[exec]\nkill-timeout = 1e400\n")
@example("[ingest]\nmax-tasks = " + "9" * 5000 + "\n")
@example("[ingest]\nmax-tasks = -" + "9" * 4000 + "\n")
@example("[policy.limits.job-size.max]\nnnodes = -" + "9" * 4000 + "\n")
@example("[policy.limits.job-size.max]\nnnodes = " + "9" * 4000 + "\n")
@example("[policy.limits]\nduration = " + "9" * 4000 + "\n")
@example("[sched]\nmode = \"" + "x" * 4000 + "\"\n")
@example("a = " + "[" * 100000 + "\n")
@example("[[resource.config]]\nhosts = \"n0\"\ncores = \"0-4294967293\"\nsockets = 2\n")
def test_instance_config_toml(text: str) -> None:
    """InstanceConfig.from_toml: a config or a clean ConfigError (a ValueError)."""
    result = outcome(InstanceConfig.from_toml, text)
    if isinstance(result, ValueError):
        assert isinstance(result, ConfigError)
    outcome(InstanceConfig.from_toml, text.encode("utf-8", "surrogatepass"))


@fuzz_settings()
@given(CONFIG_TEXTS)
def test_queue_config_toml(text: str) -> None:
    """QueueConfig.from_toml: queues or a clean ConfigError."""
    result = outcome(QueueConfig.from_toml, text)
    if isinstance(result, ValueError):
        assert isinstance(result, ConfigError)


@fuzz_settings()
@given(st.one_of(resource_toml(), CONFIG_TEXTS))
@example("[[resource.config]]\nhosts = \"n0\"\ncores = \"0-4294967293\"\nsockets = 2\n")
@example("[[resource.config]]\nhosts = \"n0\"\ncores = \"0-4294967293\"\n"
         "sockets = 2147483647\n")
@example("[[resource.config]]\nhosts = \"n[0-65535]\"\ncores = \"0-3\"\n")
def test_inventory_toml(text: str) -> None:
    """Inventory.from_toml: an inventory (that round-trips) or a clean ConfigError."""
    result = outcome(Inventory.from_toml, text)
    if isinstance(result, ValueError):
        assert isinstance(result, ConfigError)
    elif len(result) < 1000:
        assert Inventory.from_dict(result.to_dict()) == result


# -- RFC 14 jobspecs -----------------------------------------------------------------

_JOBSPEC_VALUES = st.one_of(
    json_values(6), idset_text(), count_text(), EDGE_INTS,
    st.sampled_from([{"min": 1, "max": 4294967294, "operator": "^", "operand": 2}, "1+",
                     [], {}, "slot", "node", "core", "gpu", {"type": "core", "count": 1}]
                    ).map(copy.deepcopy),  # fresh objects: mutations must not alter the pool
)


def jobspec_docs() -> st.SearchStrategy[Any]:
    """Valid jobspecs with a few values mutated, or random JSON."""
    return st.one_of(
        st.sampled_from(JOBSPEC_DOCS).flatmap(lambda d: mutated(d, values=_JOBSPEC_VALUES)),
        json_values(10),
    )


@fuzz_settings()
@given(jobspec_docs(), st.booleans())
def test_jobspec_from_dict(doc: Any, v1: bool) -> None:
    """Jobspec.from_dict: a jobspec whose properties all work, or a clean JobspecError."""
    result = outcome(Jobspec.from_dict, doc, v1=v1)
    if isinstance(result, ValueError):
        assert isinstance(result, JobspecError)
        return
    again = Jobspec.from_dict(result.to_dict(), v1=v1)
    assert again == result
    _ = (result.nnodes, result.ncores, result.ngpus, result.nslots, result.name,
         result.command, result.environment, result.duration, result.constraints,
         result.dependencies, repr(result))


_YAML_TOKENS = ["&a ", "*a", "!!binary ", "!!python/object ", "<<: ", "- ", ": ", "{", "}",
                "[", "]", ",", "|\n  x", ">", "---\n", "...\n", "%YAML 1.1\n", "? ", "'", '"',
                "\n", "  ", "0x1F", "1_000", "1:30:00", "2001-12-14", "=", "~", "null",
                ".inf", ".nan", "yes", "0o17", "9" * 30, "!", "!!str ", "!!map ", "\t", "#"]


@st.composite
def yaml_text(draw: st.DrawFn) -> str:
    """YAML: valid jobspecs (dumped as YAML or JSON, maybe mutated as text) or token soup."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        doc = draw(jobspec_docs())
        return yaml.safe_dump(doc) if draw(st.booleans()) else json.dumps(doc)
    if kind == 1:
        base = draw(st.sampled_from(VALID_JOBSPECS)).read_text()
        return draw(_mutated_text(base))
    if kind == 2:
        return "".join(draw(st.lists(st.one_of(st.sampled_from(_YAML_TOKENS),
                                               grammar_text(max_size=5)), max_size=30)))
    return draw(st.text(max_size=200))


@fuzz_settings()
@given(yaml_text(), st.booleans())
@example("a: &x [1]\nb: *x\n", False)
@example("[" * 10000 + "]" * 10000, False)
@example("- " * 5000 + "x", False)
@example("{" * 200, False)
@example("x: !!python/object:os.system 1\n", False)
@example("x: 1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22:23:24:25\n", False)
@example("\ufeffversion: 1\n", False)
def test_jobspec_from_yaml(text: str, v1: bool) -> None:
    """Jobspec.from_yaml(text): a jobspec or a clean JobspecError, for str and bytes."""
    for data in (text, text.encode("utf-8", "surrogatepass")):
        result = outcome(Jobspec.from_yaml, data, v1=v1)
        if isinstance(result, ValueError):
            assert isinstance(result, JobspecError)
        else:
            # (not from_yaml: YAML refuses raw control characters JSON may hold)
            assert Jobspec.from_dict(orjson.loads(result.dumps()), v1=v1) == result


@fuzz_settings(0.5)
@given(st.binary(max_size=300))
def test_jobspec_from_yaml_bytes(data: bytes) -> None:
    """Jobspec.from_yaml(random bytes): a clean JobspecError (or, rarely, a jobspec)."""
    result = outcome(Jobspec.from_yaml, data)
    if isinstance(result, ValueError):
        assert isinstance(result, JobspecError)


def test_error_types_are_value_errors() -> None:
    """The documented error types are ValueErrors, which every property above relies on."""
    for cls in (JobspecError, ConfigError, PolicyError):
        assert issubclass(cls, ValueError)


# -- regressions: bugs the fuzzing found ---------------------------------------------


def test_sockets_split_runs_not_expanded_ids() -> None:
    """A host with billions of core ids split into sockets (was a MemoryError)."""
    inv = Inventory.from_toml('[[resource.config]]\nhosts = "n0"\ncores = "0-2147483645"\n'
                              "sockets = 2\n")
    assert inv[0].sockets == (IDSet("0-1073741822"), IDSet("1073741823-2147483645"))
    inv = Inventory.from_toml('[[resource.config]]\nhosts = "n0"\ncores = "0,2,4,6,8,10"\n'
                              "sockets = 3\n")
    assert inv[0].sockets == (IDSet("0,2"), IDSet("4,6"), IDSet("8,10"))


def test_sockets_are_bounded() -> None:
    """sockets = 2147483647 would build that many IDSets (a hang)."""
    with pytest.raises(ConfigError, match=r"^resource.config\[0\].sockets: 2147483647 is more "
                                          r"than 1024 sockets$"):
        Inventory.from_toml('[[resource.config]]\nhosts = "n0"\ncores = "0-2147483645"\n'
                            "sockets = 2147483647\n")


@pytest.mark.parametrize("parse", [InstanceConfig.from_toml, QueueConfig.from_toml,
                                   Inventory.from_toml])
@pytest.mark.parametrize("text", ["a = " + "9" * 5000 + "\n", "a = " + "[" * 100_000 + "\n"])
def test_toml_oddities_are_config_errors(parse: Any, text: str) -> None:
    """tomllib raises a plain ValueError for huge ints and RecursionError for deep arrays."""
    with pytest.raises(ConfigError, match=r"^invalid TOML: "):
        parse(text)


@pytest.mark.parametrize(("text", "message"), [
    ('"x\\ny" = 1\n', "'x\\ny': unknown key (known: policy, queues, resource, ingest, exec, "
                      "sched, accounting, job-manager, web, forecast)"),
    ('[exec]\n"a\\u2028b" = 1\n', "exec.'a\\u2028b': unknown key"),
    ('[sched]\nmode = "' + "x" * 3000 + '"\n', "sched.mode: expected single, unlimited or "
                                               "limited, got '" + "x" * 39),
    ("[policy.limits.job-size.max]\nnnodes = " + "9" * 3000 + "\n",
     # too long to print: named by its size (fluxes.formats.shown)
     "policy.limits.job-size.max.nnodes: a 9966-bit integer is too large"),
    ('[queues."a\\nb"]\n', "queues.'a\\nb': invalid queue name 'a\\nb'"),
    ('[queues.a]\n"p\\nq" = 1\n', "queues.a.'p\\nq': unknown key"),
])
def test_config_messages_stay_on_one_line(text: str, message: str) -> None:
    """Quoted TOML keys may hold newlines; values may be huge: the message stays short."""
    with pytest.raises(ConfigError) as info:
        InstanceConfig.from_toml(text)
    assert str(info.value).startswith(message)
    assert len(str(info.value).splitlines()) == 1 and len(str(info.value)) < 200


def test_long_input_is_shortened_in_messages() -> None:
    """idset and dependency messages quote the input shortened, not whole."""
    with pytest.raises(ValueError, match=r"leading zero") as info:
        IDSet("0" + "1" * 5000)
    assert len(str(info.value)) < 200
    with pytest.raises(ValueError, match=r"expected key=value") as info:
        depend.parse_dependency("afterok:1?" + "x" * 5000)
    assert len(str(info.value)) < 200


def test_dependency_query_cannot_replace_scheme_or_value() -> None:
    """A percent-encoded key named the same as scheme or value is a duplicate too."""
    with pytest.raises(ValueError, match=r"key 'scheme' given twice"):
        depend.parse_dependency("afterok:1?sch%65me=begin-time")
    with pytest.raises(ValueError, match=r"key 'value' given twice"):
        depend.parse_dependency("begin-time:1?%76alue=x")


def test_jobspec_path_escapes_line_breaks() -> None:
    """Keys holding U+0085 or U+2028 must not split the message (JSON leaves them raw)."""
    doc = copy.deepcopy(JOBSPEC_DOCS[0])
    doc["attributes"]["user"] = {"\x85": {"\u2028": math.nan}}
    with pytest.raises(JobspecError) as info:
        Jobspec.from_dict(doc)
    assert str(info.value) == 'attributes.user["\\u0085"]["\\u2028"]: nan is not a finite number'
