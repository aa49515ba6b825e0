"""The exec worker's link to its spawner, without a spawner: what it keeps of the ends
the spawner reports (fluxes/proc/spawner_client.py)."""

from __future__ import annotations

import os
import resource
import socket
from pathlib import Path

import pytest

from fluxes.proc import spawner_client
from fluxes.proc.spawner import decode
from fluxes.proc.spawner_client import SpawnerDown, SpawnerLink, SpawnError


def test_ends_no_task_took_are_kept_within_a_bound(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawner_client, "MAX_ENDED", 3)
    link = SpawnerLink(str(tmp_path), enabled=False)
    for pid in range(100, 110):
        link._ended([b"%d" % pid, b"0", b"fluxes-task:t:0:1:0"])
    # the newest stay (the older ones' status files settle them)
    assert list(link.ended) == [107, 108, 109]
    assert link.fresh == list(range(100, 110))


def test_an_end_the_worker_took_from_the_zombie_is_not_kept(tmp_path: Path
                                                            ) -> None:
    link = SpawnerLink(str(tmp_path), enabled=False)
    link.running[7] = "m"
    link.taken(7)
    link._ended([b"7", b"0", b"m"])
    assert link.ended == {} and link.fresh == [] and link.early == {}


def _fake_spawner(link: SpawnerLink) -> socket.socket:
    """The test plays the spawner on the other end of the link's socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link.sock = ours
    return theirs


def _request(link: SpawnerLink, mark: str) -> None:
    link.request(marker=mark, prefix="/p/" + mark, cwd="/", path="/bin/true", argv=["true"],
                 env={"A": "1"}, fds={})


def test_requests_are_answered_in_order_and_answers_read_ahead_wait(tmp_path: Path) -> None:
    link = SpawnerLink(str(tmp_path), enabled=False)
    spawner = _fake_spawner(link)
    _request(link, "a")
    _request(link, "b")
    _request(link, "c")
    kind, fields = decode(spawner.recv(65536))
    assert kind == b"S" and fields[:4] == [b"a", b"/p/a", b"/", b"/bin/true"]
    assert link.awaited and list(link.asked) == ["a", "b", "c"]
    # a's answer, then b's task's end (before b's answer is taken), then b's answer
    spawner.send(b"P10")
    spawner.send(b"X11\0" + b"0\0b")
    spawner.send(b"P11")
    link.read()  # the loop's read: answers kept for their requests, the end recorded
    assert [a[0] for a in link.answers] == [b"P", b"P"] and link.ended == {11: ("b", 0)}
    assert link.awaited  # c's answer is still to come
    assert link.answer() == 10 and link.running == {10: "a"}
    assert link.answer() == 11 and 11 not in link.running  # its end was told already
    spawner.send(b"E127\0cannot execute")
    with pytest.raises(SpawnError) as failed:
        link.answer()  # waits for it
    assert failed.value.code == 127
    assert not link.asked and not link.answers and not link.awaited


def test_requests_the_spawner_never_answered_fall_back_when_it_goes(tmp_path: Path) -> None:
    link = SpawnerLink(str(tmp_path), enabled=False)
    spawner = _fake_spawner(link)
    _request(link, "a")
    _request(link, "b")
    spawner.send(b"P10")
    link.read()
    spawner.close()  # the spawner dies before answering b
    link.read()
    assert not link.up
    # a was started: nobody will report its end (an orphan, settled by its status file)
    assert link.answer() == 10 and 10 in link.orphans and link.running == {}
    with pytest.raises(SpawnerDown):
        link.answer()  # b: the worker spawns it under the wrapper instead
    assert not link.asked and not link.answers


def test_an_answer_comes_on_a_socket_numbered_above_select_s_limit(tmp_path: Path) -> None:
    # a worker running hundreds of tasks holds over 1,024 descriptors: select() refuses
    # any numbered above that, which read the link as down (every task then fell back
    # to the wrapper)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"at most {hard} descriptors here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        link = SpawnerLink(str(tmp_path), enabled=False)
        spawner = _fake_spawner(link)
        assert link.sock is not None and link.sock.fileno() > 1024
        _request(link, "a")
        spawner.send(b"P10")
        assert link.answer() == 10 and link.up
        spawner.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_orphans_are_kept_within_a_bound(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spawner_client, "MAX_ENDED", 3)
    link = SpawnerLink(str(tmp_path), enabled=False)
    for pid in range(100, 110):
        link.running[pid] = f"m:{pid}"
        link.down("test")
    # a spawner that keeps failing: the newest stay (status files settle the others)
    assert list(link.orphans) == [107, 108, 109]
