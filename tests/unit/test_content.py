"""fluxes.domain.jm.content: a jobspec split into blobs and spliced back is the same object."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.jm.content import PREFIX, Blob, digest, job_content, splice, split

_text = st.text(max_size=12)
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | _text,
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(_text, inner, max_size=3), max_leaves=10)


@st.composite
def jobspecs(draw: st.DrawFn) -> dict[str, Any]:
    """Objects shaped like jobspecs: environments (maybe empty or missing) among other keys
    in any order, at the top, in attributes and in system."""
    system = draw(st.dictionaries(_text, _json, max_size=3))
    if draw(st.booleans()):
        system["environment"] = draw(st.dictionaries(_text, st.none() | _text, max_size=4))
    attributes = draw(st.dictionaries(_text, _json, max_size=2))
    if draw(st.booleans()):
        attributes["system"] = system
    doc = draw(st.dictionaries(_text, _json, max_size=3))
    doc["attributes"] = attributes
    return doc


@given(jobspecs())
def test_split_then_splice_is_the_same_object(doc: dict[str, Any]) -> None:
    raw = orjson.dumps(doc)
    spec, env = split(raw)
    if env is None:
        assert spec == raw
    else:
        assert spec.startswith(PREFIX) and b"environment" not in spec[:len(PREFIX) + 14]
        assert orjson.loads(env) == doc["attributes"]["system"]["environment"]
    assert orjson.loads(splice(spec, env)) == doc


@given(jobspecs(), st.dictionaries(_text, _json, max_size=2))
def test_job_content_gives_both_jobspecs_back(doc: dict[str, Any],
                                              defaults: dict[str, Any]) -> None:
    full = {**doc, **defaults} if defaults else None
    content = job_content(orjson.dumps(doc), None if full is None else orjson.dumps(full))
    assert orjson.loads(content.jobspec()) == doc
    got = content.jobspec_full()
    assert (got is None) == (full is None)
    if got is not None:
        assert orjson.loads(got) == full
    for blob in content.blobs:
        assert blob.digest == digest(blob.data)


def test_the_environment_is_one_blob_shared_by_both_jobspecs() -> None:
    env = {"PATH": "/bin", "HOME": "/h"}
    doc = {"version": 1, "attributes": {"system": {"cwd": "/", "environment": env}}}
    full = {**doc, "attributes": {"system": {"cwd": "/", "environment": env, "duration": 60}}}
    content = job_content(orjson.dumps(doc), orjson.dumps(full))
    assert content.env == Blob.of(orjson.dumps(env))
    assert content.full is not None and b"PATH" not in content.full.data
    assert content.spec.data == b'{"attributes":{"system":{"cwd":"/"}},"version":1}'


def test_defaults_that_change_the_environment_keep_both_whole() -> None:
    doc = {"attributes": {"system": {"environment": {"A": "1"}}}}
    full = {"attributes": {"system": {"environment": {"A": "2"}}}}
    content = job_content(orjson.dumps(doc), orjson.dumps(full))
    assert content.env is None and content.spec.data == orjson.dumps(doc)
    assert content.full is not None and content.full.data == orjson.dumps(full)


def test_no_environment_to_split() -> None:
    doc: object
    for doc in ({"attributes": {"system": {"environment": {}}}}, {"attributes": 3}, [1]):
        raw = orjson.dumps(doc)
        assert split(raw) == (raw, None)


def test_errors() -> None:
    with pytest.raises(ValueError, match="jobspec is not JSON"):
        split(b"{")
    with pytest.raises(ValueError, match="not in split form"):
        splice(b'{"version":1}', b"{}")
    assert len(digest(b"")) == 32 and digest(b"a") != digest(b"b")


def test_the_copies_of_a_cc_array_share_one_environment_blob() -> None:
    """FLUXES_JOB_CC is kept out of the environment blob (the job hash's ``cc``), so that
    the copies of a --cc array share their blobs; splicing it back gives each copy's
    jobspec (the same object) again."""
    from fluxes.domain.jm.arrays import with_cc_variable

    base = {"attributes": {"system": {"environment": {"HOME": "/h", "PATH": "/bin"},
                                      "cwd": "/tmp"}}, "version": 1}
    contents = [job_content(orjson.dumps(with_cc_variable(base, i))) for i in (1, 2, 30)]
    assert len({c.env for c in contents}) == 1 and len({c.spec for c in contents}) == 1
    assert [c.cc for c in contents] == ["1", "2", "30"]
    for i, c in zip((1, 2, 30), contents, strict=True):
        assert orjson.loads(c.jobspec()) == with_cc_variable(base, i)


def test_an_environment_of_only_the_cc_variable_or_a_non_string_stays_whole() -> None:
    for env in ({"FLUXES_JOB_CC": "3"}, {"FLUXES_JOB_CC": 3, "A": "b"}):
        doc = {"attributes": {"system": {"environment": env}}, "version": 1}
        content = job_content(orjson.dumps(doc))
        assert content.cc is None
        assert orjson.loads(content.jobspec()) == doc
