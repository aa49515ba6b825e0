"""The Redis identity of a child instance (fluxes.store.security.child_acl_rules), no Redis:
every key the child's workers use is reachable, nothing of the parent's is writable, and
only the job's own hash, the instance facts and the owner's blobs are readable."""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterator

import pytest

from fluxes.cli.main import build_parser
from fluxes.domain.nested import child_namespace, runs_child_instance
from fluxes.store.keys import Keys
from fluxes.store.security import (
    CHILD_DENIED,
    USER_NAME,
    child_acl_rules,
    child_key_patterns,
    child_parent_read_patterns,
    child_user_name,
    parse_child_user,
    password_hash,
)

JOBID = 123
OWNER = 5001
OTHER = 5002

# Sample arguments for the Keys methods, by parameter name; a method with a parameter
# not listed here makes the test fail, so a new kind of key cannot be forgotten.
SAMPLES: dict[str, list[object]] = {
    "rank": [0, 3], "partition": [0, 1, 2, 3], "jobid": [JOBID, 124, 1230], "owner": [OWNER, OTHER],
    "user": ["alice", "bob"], "request": ["r1"], "digest": ["d" * 8], "token": ["t0ken"],
    "holder": ["scheduler@node1"],
}
#: Members of Keys that are not key names (prefixes and helpers).
NOT_KEYS = {"g", "p", "partition_of", "same_slot", "ns", "partitions"}


def all_keys(keys: Keys) -> Iterator[str]:
    """Every key name ``keys`` can make, from fluxes/store/keys.py by introspection."""
    seen = 0
    for name, member in inspect.getmembers(Keys):
        if name.startswith("_") or name in NOT_KEYS:
            continue
        seen += 1
        if isinstance(member, property):
            yield getattr(keys, name)
            continue
        params = list(inspect.signature(member).parameters)[1:]
        combos: list[list[object]] = [[]]
        for param in params:
            assert param in SAMPLES, f"Keys.{name}: no sample for {param!r}"
            combos = [[*c, v] for c in combos for v in SAMPLES[param]]
        for args in combos:
            key = getattr(keys, name)(*args)
            # the blob prefix is where blob keys begin: complete it into one
            yield key + f"{OWNER}:d" if name == "blob_prefix" else key
    assert seen > 40  # the key catalogue was found


def redis_glob(pattern: str) -> re.Pattern[str]:
    """A Redis glob pattern (``* ? [...]``, ``\\`` escapes) as a regular expression."""
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        if ch == "*":
            out += ".*"
        elif ch == "?":
            out += "."
        elif ch == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1:end] + "]"
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + r"\Z", re.DOTALL)


def matches(patterns: list[str], key: str) -> bool:
    return any(redis_glob(p).match(key) for p in patterns)


def split_rules(rules: list[str]) -> tuple[list[str], list[str]]:
    """(read-write key patterns, read-only key patterns) of ACL rules."""
    rw = [r[1:] for r in rules if r.startswith("~")]
    ro = [r[3:] for r in rules if r.startswith("%R~")]
    assert not [r for r in rules if r.startswith("%")] or ro
    return rw, ro


@pytest.mark.parametrize("parent_ns,partitions", [("fx", 1), ("fx", 4), ("site.7", 1),
                                                  ("a*b", 2)])
def test_the_child_reaches_every_key_of_its_own_and_of_its_children(
        parent_ns: str, partitions: int) -> None:
    child_ns = child_namespace(parent_ns, JOBID)
    rw, _ro = split_rules(child_acl_rules(Keys(parent_ns, partitions), JOBID, OWNER,
                                          child_ns, "pw"))
    assert rw == [f"~{p}"[1:] for p in child_key_patterns(child_ns)]
    for keys in (Keys(child_ns), Keys(child_namespace(child_ns, 77)),
                 Keys(child_namespace(child_namespace(child_ns, 77), 9), 3)):
        for key in all_keys(keys):
            assert matches(rw, key), key


@pytest.mark.parametrize("partitions", [1, 4])
def test_nothing_of_the_parent_is_writable_and_little_is_readable(partitions: int) -> None:
    parent = Keys("fx", partitions)
    child_ns = child_namespace("fx", JOBID)
    rw, ro = split_rules(child_acl_rules(parent, JOBID, OWNER, child_ns, "pw"))
    allowed = {parent.instance, parent.job(JOBID)}
    readable = set()
    for key in all_keys(parent):
        assert not matches(rw, key), key
        if matches(ro, key):
            readable.add(key)
    blobs = {k for k in readable if ":blob:" in k}
    assert readable - blobs == allowed
    # only the owner's blobs (the job's jobspec is one), never another user's
    assert blobs and all(f":blob:{OWNER}:" in k for k in blobs)
    assert all(parent.p(parent.partition_of(JOBID)) in k for k in blobs)
    # the job's eventlog, another job, the owner's output, users, submit streams: no
    for key in (parent.eventlog(JOBID), parent.job(124), parent.output(OWNER, JOBID),
                parent.users, parent.submit("alice"), parent.children,
                parent.exec_rank(0), parent.blob(0, OTHER, "d")):
        assert not matches(rw + ro, key), key


def test_siblings_and_other_instances_are_out_of_reach() -> None:
    child_ns = child_namespace("fx", JOBID)
    rw, ro = split_rules(child_acl_rules(Keys("fx"), JOBID, OWNER, child_ns, "pw"))
    for ns in ("fx.1234", "fx.12", "fx2.123", "fx.124", "fx.123x", "fy"):
        for key in all_keys(Keys(ns)):
            assert not matches(rw, key), key
            assert not matches(ro, key), key
    # a namespace with glob characters is taken literally
    rw, _ro = split_rules(child_acl_rules(Keys("a*"), 5, OWNER, "a*.5", "pw"))
    assert matches(rw, "{a*.5}:instance") and not matches(rw, "{ab.5}:instance")


def test_rules_start_afresh_with_a_hashed_password_and_deny_the_dangerous() -> None:
    rules = child_acl_rules(Keys("fx"), JOBID, OWNER, "fx.123", "s3cret")
    assert rules[:4] == ["reset", "on", f"#{password_hash('s3cret')}", "resetchannels"]
    assert "s3cret" not in " ".join(rules)
    assert rules.index("+@all") < min(rules.index(d) for d in CHILD_DENIED)
    assert "-@dangerous" in rules and "-@admin" in rules and "-scan" in rules
    assert not any(r in ("~*", "&*", "allkeys", "allchannels") for r in rules)
    assert not any(r.startswith("(") for r in rules)  # no selectors
    with pytest.raises(ValueError):
        child_acl_rules(Keys("fx"), JOBID, OWNER, "fx.123", "")
    with pytest.raises(ValueError):
        child_parent_read_patterns(Keys("fx"), JOBID, -1)


def test_child_user_names_are_never_fluxes_user_names() -> None:
    name = child_user_name("fx.123", 4)
    assert name == "child:fx.123:4"
    assert parse_child_user(name) == ("fx.123", 4)
    assert not USER_NAME.fullmatch(name)
    for other in ("alice", "child", "child:", "child:fx", "child:fx.1:x", "default"):
        assert parse_child_user(other) is None, other
    with pytest.raises(ValueError):
        child_user_name("fx.123", -1)
    with pytest.raises(ValueError):
        child_user_name("fx{1}", 0)


def _cli_jobspec(argv: list[str]) -> dict[str, object]:
    from fluxes.cli.cmd_batch import allocation_jobspec

    args = build_parser().parse_args(argv)
    assert isinstance(args, argparse.Namespace)
    return allocation_jobspec(args, [], "#!/bin/sh\n" if argv[0] == "batch" else None).to_dict()


def test_batch_and_alloc_jobs_are_marked_as_running_a_child() -> None:
    assert runs_child_instance(_cli_jobspec(["batch", "-N1", "x.sh"]))
    assert runs_child_instance(_cli_jobspec(["alloc", "-N2"]))
    runner = [{"command": ["/usr/bin/python3", "-m", "fluxes.cli.main", "instance-child",
                           "--batch", "--"], "slot": "task", "count": {"per_slot": 1}}]
    # a batch script alone marks it too (jobspecs built without the CLI)
    assert runs_child_instance({"attributes": {"system": {"batch": {"script": "x"}}},
                                "tasks": runner})
    assert runs_child_instance({"attributes": {"system": {"child-instance": True}},
                                "tasks": [{"command": ["fluxes", "instance-child"]}]})
    specs: list[dict[str, object]] = [
        {}, {"attributes": {"system": {"duration": 0}}},
        {"attributes": {"system": {"child-instance": "yes"}}, "tasks": runner},
        {"attributes": {"system": {"batch": "x"}}, "tasks": runner}, {"attributes": []},
        # the attribute set by hand on a plain job (--setattr=system.child-instance=true)
        {"attributes": {"system": {"child-instance": True}},
         "tasks": [{"command": ["sh", "-c", "redis-cli EVAL ..."]}]},
        {"attributes": {"system": {"batch": {"script": "x"}}},
         "tasks": [{"command": ["sleep", "instance-child"]}]},
        {"attributes": {"system": {"child-instance": True}}}]
    for spec in specs:
        assert not runs_child_instance(spec), spec
