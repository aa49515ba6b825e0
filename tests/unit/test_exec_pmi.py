"""The PMI-1 simple wire protocol server (fluxes/domain/exec/pmi.py) and the task order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fluxes.domain.exec.layout import compute_layout
from fluxes.domain.exec.pmi import (
    LINE_MAX,
    PmiShare,
    parse_line,
    pmi_mode,
    without_stale,
)
from fluxes.domain.exec.taskorder import parse_taskmap, task_order
from fluxes.formats import taskmap
from fluxes.formats.jobspec import Jobspec
from fluxes.formats.rset import ResourceSet


def share(tasks: list[int], size: int | None = None, nnodes: int = 1,
          mapping: str = "(vector,(0,1,2))") -> PmiShare:
    return PmiShare(jobid=42, size=size or len(tasks), nnodes=nnodes, node_rank=0,
                    tasks=tasks, mapping=mapping)


def say(pmi: PmiShare, rank: int, *lines: str) -> list[str]:
    """Feed ``lines`` from task ``rank``; the answers sent to it."""
    pmi.feed(rank, "".join(line + "\n" for line in lines).encode())
    return [line.decode() for r, line in pmi.drain() if r == rank]


def init(pmi: PmiShare, *ranks: int) -> None:
    for rank in ranks:
        assert say(pmi, rank, "cmd=init pmi_version=1 pmi_subversion=1") == [
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"]


def test_what_mpich_asks_at_init_is_answered() -> None:
    pmi = share([0, 1])
    init(pmi, 0)
    assert say(pmi, 0, "cmd=get_maxes") == [
        "cmd=maxes rc=0 kvsname_max=256 keylen_max=256 vallen_max=1024\n"]
    assert say(pmi, 0, "cmd=get_appnum") == ["cmd=appnum rc=0 appnum=0\n"]
    assert say(pmi, 0, "cmd=get_my_kvsname") == ["cmd=my_kvsname rc=0 kvsname=kvs_42\n"]
    assert say(pmi, 0, "cmd=get_universe_size") == ["cmd=universe_size rc=0 size=2\n"]
    assert say(pmi, 0, "cmd=get kvsname=kvs_42 key=PMI_process_mapping") == [
        "cmd=get_result rc=0 msg=success value=(vector,(0,1,2))\n"]
    # a reserved key that is not there reads as empty (RFC 13); others are not found
    assert say(pmi, 0, "cmd=get kvsname=kvs_42 key=PMI_other") == [
        "cmd=get_result rc=0 msg=success value=\n"]
    assert say(pmi, 0, "cmd=get kvsname=kvs_42 key=nope") == [
        "cmd=get_result rc=-1 msg=key_nope_not_found\n"]
    assert say(pmi, 0, "cmd=publish_name service=s port=p") == [
        "cmd=publish_result rc=-1 msg=not_supported\n"]
    assert say(pmi, 0, "mcmd=spawn", "nprocs=1", "execname=x", "endcmd") == [
        "cmd=spawn_result rc=-1\n"]
    assert pmi.failure is None


def test_a_barrier_on_one_node_completes_when_every_task_entered_it() -> None:
    pmi = share([0, 1])
    init(pmi, 0, 1)
    assert say(pmi, 0, "cmd=put kvsname=kvs_42 key=card-0 value=abc def") == [
        "cmd=put_result rc=0 msg=success\n"]
    assert say(pmi, 0, "cmd=barrier_in") == []
    assert pmi.take_round() is None  # one node: nothing to exchange
    pmi.feed(1, b"cmd=barrier_in\n")
    assert sorted(pmi.drain()) == [(0, b"cmd=barrier_out rc=0\n"),
                                   (1, b"cmd=barrier_out rc=0\n")]
    assert say(pmi, 1, "cmd=get kvsname=kvs_42 key=card-0") == [
        "cmd=get_result rc=0 msg=success value=abc def\n"]
    assert say(pmi, 1, "cmd=finalize") == ["cmd=finalize_ack rc=0\n"]


def test_a_round_between_nodes_goes_through_the_exchange_then_gets_wait_for_the_fetch() -> None:
    pmi = share([2, 3], size=4, nnodes=2)
    init(pmi, 2, 3)
    say(pmi, 2, "cmd=put kvsname=k key=a value=1", "cmd=barrier_in")
    assert pmi.take_round() is None  # task 3 is not in yet
    say(pmi, 3, "cmd=barrier_in")
    assert pmi.take_round() == (1, {"a": "1"})
    assert pmi.take_round() is None  # handed over once
    assert pmi.drain() == []  # nobody is released before the round completes
    pmi.complete(1)
    assert sorted(pmi.drain()) == [(2, b"cmd=barrier_out rc=0\n"),
                                   (3, b"cmd=barrier_out rc=0\n")]
    pmi.complete(1)  # a repeated wake-up changes nothing
    assert pmi.drain() == []
    assert say(pmi, 2, "cmd=get kvsname=k key=b") == []  # waits for the exchange's KVS
    assert pmi.want_fetch and pmi.waiting_gets == [(2, "b")]
    pmi.loaded({"a": "1", "b": "2"})
    assert pmi.drain() == [(2, b"cmd=get_result rc=0 msg=success value=2\n")]
    assert say(pmi, 3, "cmd=get kvsname=k key=a") == [
        "cmd=get_result rc=0 msg=success value=1\n"]


def test_abort_fails_the_job_without_an_answer() -> None:
    pmi = share([0, 1])
    init(pmi, 0)
    assert say(pmi, 0, "cmd=abort exitcode=7") == []
    assert pmi.failure == "PMI_Abort: task 0 exit code 7"
    pmi2 = share([0])
    init(pmi2, 0)
    say(pmi2, 0, "cmd=abort exitcode=1 message=it went wrong")
    assert pmi2.failure == "PMI_Abort: it went wrong (task 0 exit code 1)"


def test_a_task_gone_before_finalize_fails_a_job_that_uses_pmi() -> None:
    pmi = share([0, 1])
    init(pmi, 0, 1)
    say(pmi, 0, "cmd=finalize")
    pmi.feed(0, b"")
    before = pmi.failure  # finalized, then gone: fine
    pmi.feed(1, b"")
    assert before is None
    assert pmi.failure == "PMI: task 1 exited before PMI_Finalize"
    assert not pmi.clean()


def test_a_task_gone_without_pmi_fails_the_job_once_another_uses_it() -> None:
    pmi = share([0, 1])
    pmi.feed(1, b"")  # exited before MPI_Init
    before = pmi.failure  # nobody speaks PMI (yet): a plain job
    init(pmi, 0)
    assert before is None
    assert pmi.failure == "PMI: task 1 exited before PMI_Finalize"


def test_a_plain_job_never_fails_and_is_not_clean() -> None:
    pmi = share([0, 1])
    pmi.feed(0, b"")
    pmi.feed(1, b"")
    assert pmi.failure is None
    assert not pmi.clean()  # on several nodes, its leave tells the others


@pytest.mark.parametrize("line", [
    b"cmd=get_maxes", b"garbage", b"cmd=frobnicate", b"\xff\xfe", b"mcmd=weird",
])
def test_a_protocol_error_fails_the_job(line: bytes) -> None:
    pmi = share([0])
    if line != b"cmd=get_maxes":
        init(pmi, 0)
    pmi.feed(0, line + b"\n")
    assert pmi.failure is not None and pmi.failure.startswith("PMI: task 0: protocol error")


def test_an_endless_line_is_refused() -> None:
    pmi = share([0])
    init(pmi, 0)
    pmi.feed(0, b"cmd=put key=x value=" + b"y" * (LINE_MAX + 1))
    assert pmi.failure is not None and "too long" in pmi.failure


def test_puts_are_bounded() -> None:
    pmi = share([0])
    init(pmi, 0)
    assert say(pmi, 0, f"cmd=put kvsname=k key=x value={'v' * 2000}") == [
        "cmd=put_result rc=-1 msg=invalid_key_or_value\n"]
    assert say(pmi, 0, "cmd=put kvsname=k key=PMI_mine value=1") == [
        "cmd=put_result rc=-1 msg=reserved_key\n"]


@given(st.binary(max_size=300))
def test_any_bytes_are_answered_or_fail_the_job_never_raise(data: bytes) -> None:
    pmi = share([0, 1], nnodes=2)
    pmi.feed(0, b"cmd=init pmi_version=1 pmi_subversion=1\n" + data)
    pmi.feed(0, b"")
    pmi.take_round()
    pmi.drain()


def test_parse_line_takes_the_rest_of_the_line_as_the_value() -> None:
    assert parse_line(b"cmd=put kvsname=k key=a value=x y=z") == {
        "cmd": "put", "kvsname": "k", "key": "a", "value": "x y=z"}
    with pytest.raises(ValueError):
        parse_line(b"key=a")


def test_pmi_mode_and_stale_variables() -> None:
    assert pmi_mode(None) == "simple"
    assert pmi_mode("simple") == pmi_mode("pmix,simple") == "simple"
    assert pmi_mode("off") == "off"
    with pytest.raises(ValueError):
        pmi_mode("pmix")
    with pytest.raises(ValueError):
        pmi_mode(1)
    assert without_stale({"PMI_FD": "3", "PMI_RANK": "1", "PATH": "/bin"}) == {"PATH": "/bin"}


# ----------------------------------------------------------------------------- task order


def test_cyclic_and_manual_orders() -> None:
    assert task_order(None, [2, 2]) is None
    assert task_order("block", [2, 2]) is None
    assert task_order("cyclic", [2, 2]) == [[0, 2], [1, 3]]
    assert task_order({"scheme": "cyclic", "value": ""}, [3, 1]) == [[0, 2, 3], [1]]
    assert task_order("cyclic:2", [4, 4]) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert task_order('manual:{"version":1,"map":[[0,2,1,2]]}', [2, 2]) == [[0, 2], [1, 3]]
    with pytest.raises(ValueError, match="the map gives"):
        task_order('manual:{"version":1,"map":[[0,1,4,1]]}', [2, 2])
    for bad in ("spiral", "cyclic:0", "block:3", "manual:[[1]]", 7):
        with pytest.raises(ValueError):
            parse_taskmap(bad)


@given(st.lists(st.integers(0, 5), min_size=1, max_size=6).filter(any), st.integers(1, 4))
def test_cyclic_gives_every_node_its_count_and_every_task_once(counts: list[int],
                                                              size: int) -> None:
    lists = task_order(f"cyclic:{size}", counts)
    assert lists is not None
    assert [len(ids) for ids in lists] == counts
    assert sorted(t for ids in lists for t in ids) == list(range(sum(counts)))
    nodes = {t: n for n, ids in enumerate(lists) for t in ids}
    blocks = taskmap.from_nodes([nodes[t] for t in range(sum(counts))])
    back = [list(ids) for ids in taskmap.node_tasks(blocks)]
    assert back + [[]] * (len(lists) - len(back)) == lists


def test_the_layout_numbers_tasks_by_the_taskmap() -> None:
    spec = Jobspec.from_command(["app"], nnodes=2, ntasks=4).to_dict()
    spec["attributes"]["system"]["shell"] = {"options": {"taskmap": "cyclic"}}
    layout = compute_layout(spec, ResourceSet.from_ranks({0: ("0-1", None),
                                                          1: ("0-1", None)}))
    assert [list(s.task_ranks) for s in layout.shares] == [[0, 2], [1, 3]]
    assert [[t.rank for t in s.tasks()] for s in layout.shares] == [[0, 2], [1, 3]]


def test_from_nodes_spells_out_cyclic_maps() -> None:
    assert taskmap.from_nodes([0, 0, 1, 1]) == [(0, 2, 2, 1)]
    assert taskmap.pmi(taskmap.from_nodes([0, 1, 0, 1])) == "(vector,(0,2,1),(0,2,1))"
    assert taskmap.from_nodes([0, 0, 1, 1, 2, 2, 2, 2]) == [(0, 2, 2, 1), (2, 1, 4, 1)]
    with pytest.raises(ValueError):
        taskmap.from_nodes([])


def test_a_round_whose_hand_over_failed_is_taken_again() -> None:
    pmi = share([0], size=2, nnodes=2)
    init(pmi, 0)
    say(pmi, 0, "cmd=put kvsname=k key=a value=1", "cmd=barrier_in")
    taken = pmi.take_round()
    assert taken == (1, {"a": "1"})
    pmi.untake(*taken)  # Redis was unreachable
    say(pmi, 0, "cmd=put kvsname=k key=b value=2")  # (not MPICH's way, but kept)
    assert pmi.take_round() == (1, {"a": "1", "b": "2"})
