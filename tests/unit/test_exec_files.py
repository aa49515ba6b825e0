"""The exec worker's state directory (real files in a temporary directory, no Redis)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fluxes.domain.exec.jobs import ExecJob, TaskProc
from fluxes.domain.exec.outbox import Outbox
from fluxes.domain.exec.output import Budget, limit_note
from fluxes.proc.exec_files import (
    TaskFiles,
    close_streams,
    default_state_dir,
    forward_output,
    high_fd,
    read_at,
)

#: A rank directory's mode: private; as root, others may pass through to their own
#: directories (jobs run as their owners) but not list it.
PRIVATE = "0o711" if os.geteuid() == 0 else "0o700"


def files(tmp_path: Path) -> TaskFiles:
    f = TaskFiles(str(tmp_path), [0, 2])
    f.make_dirs()
    return f


def touch(path: str, data: bytes = b"") -> None:
    Path(path).write_bytes(data)


def test_rank_directories_are_private(tmp_path: Path) -> None:
    f = files(tmp_path)
    assert f.path(2, 7, 1, "out") == str(tmp_path / "rank2" / "7.1.out")
    assert oct(os.stat(tmp_path / "rank0").st_mode & 0o777) == PRIVATE


def test_status_listing_is_cached_and_relisted_on_a_miss(tmp_path: Path) -> None:
    f = files(tmp_path)
    touch(f.path(0, 7, 1, "st.3"))
    touch(f.path(0, 7, 1, "out"))
    assert f.listing(0) == {(7, 1): 3}
    touch(f.path(0, 8, 0, "st.0"))
    assert f.listing(0) == {(7, 1): 3}  # cached for the iteration
    assert f.status_code(0, 8, 0) == 0  # a miss looks again
    assert f.status_code(0, 9, 0) is None
    f.forget_listings()
    assert f.listing(0) == {(7, 1): 3, (8, 0): 0}


def test_sweep_keeps_files_of_jobs_not_known_finished(tmp_path: Path) -> None:
    f = files(tmp_path)
    for name in ("5.0.out", "5.0.st.0", "6.0.err", "notes.txt"):
        touch(str(tmp_path / "rank0" / name))
    f.sweep(0, {5})
    assert sorted(os.listdir(tmp_path / "rank0")) == ["6.0.err", "notes.txt"]
    assert f.has_files(0, 6) and not f.has_files(0, 5) and not f.has_files(0, 60)


def test_attach_reopens_forwarded_files_at_their_offsets(tmp_path: Path) -> None:
    f = files(tmp_path)
    touch(f.path(0, 7, 0, "out"), b"old\nnew\n")
    job = ExecJob(7, 0, "run", forward="oe")
    task = TaskProc(0, 1, False)
    job.tasks = [task]
    f.attach(job, task, {"stdout": 4})
    out, err = task.streams
    assert (out.name, out.offset, out.done, out.fd is not None) == ("stdout", 4, False, True)
    assert (err.name, err.done, err.fd) == ("stderr", True, None)  # no file: nothing to send
    box = Outbox()
    task.status = 0
    assert forward_output(job, Budget(), 0, box)
    assert [e["data"] for e in box.output[(-1, 7)]] == [b"new\n"]
    assert out.done and out.fd is None  # closed once all is forwarded
    assert read_at(out, 10, 0) == b""


def test_forward_output_applies_the_limit_across_streams(tmp_path: Path) -> None:
    f = files(tmp_path)
    job = ExecJob(3, 2, "run", forward="oe")
    task = TaskProc(0, 1, True)
    job.tasks = [task]
    f.create(job, task, "stdout", "out")
    f.create(job, task, "stderr", "err")
    os.write(task.streams[0].fd or -1, b"12345\n")
    os.write(task.streams[1].fd or -1, b"abcdef\n")
    box = Outbox()
    assert forward_output(job, Budget(), 10, box)
    assert [(e["stream"], e["data"]) for e in box.output[(-1, 3)]] == [
        ("stdout", b"12345\n"), ("stderr", limit_note(10, 2))]
    assert job.truncated and job.forwarded == 6
    close_streams(job)
    f.remove(job)
    assert os.listdir(tmp_path / "rank2") == []


def test_forward_output_reports_nothing_new(tmp_path: Path) -> None:
    f = files(tmp_path)
    job = ExecJob(3, 0, "run", forward="o")
    task = TaskProc(0, 1, True)
    job.tasks = [task]
    f.create(job, task, "stdout", "out")
    box = Outbox()
    assert not forward_output(job, Budget(), 0, box) and not box


def test_remove_takes_the_status_file_too(tmp_path: Path) -> None:
    f = files(tmp_path)
    job = ExecJob(4, 0, "run", forward="")
    task = TaskProc(1, 1, True)
    task.code = 2
    job.tasks = [task]
    touch(f.path(0, 4, 1, "st.2"))
    f.remove(job)
    assert os.listdir(tmp_path / "rank0") == []


def test_high_fd_moves_standard_descriptors_away() -> None:
    saved = os.dup(0)
    try:
        os.close(0)
        r, w = os.pipe()  # r takes fd 0
        assert r == 0
        moved = high_fd(r)
        assert moved > 2
        os.close(moved)
        os.close(w)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    fd = os.open(os.devnull, os.O_RDONLY)
    assert high_fd(fd) == fd
    os.close(fd)


@pytest.mark.parametrize("mode", [0o770, 0o777, 0o722])
def test_a_state_directory_in_a_shared_place_must_be_private(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shm"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp or /dev/shm
    state = shared / "fluxes-exec"
    state.mkdir()
    state.chmod(mode)  # made by someone else, or left open to them
    with pytest.raises(ValueError, match="must be a directory of this user"):
        TaskFiles(str(state), [0]).make_dirs()
    state.chmod(0o700)
    TaskFiles(str(state), [0]).make_dirs()
    assert (state / "rank0").is_dir()


def test_a_state_directory_elsewhere_is_the_sites_choice(tmp_path: Path) -> None:
    state = tmp_path / "volume"  # e.g. a pod's emptyDir: mode 0777, owned by root
    state.mkdir()
    state.chmod(0o777)
    TaskFiles(str(state), [0]).make_dirs()
    assert oct((state / "rank0").stat().st_mode & 0o777) == PRIVATE
    assert oct(state.stat().st_mode & 0o777) == "0o777"  # left as the site made it


def test_a_rank_directory_others_can_write_to_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state" / "rank0").mkdir(parents=True)
    (tmp_path / "state" / "rank0").chmod(0o777)
    with pytest.raises(ValueError, match="rank0"):
        TaskFiles(str(tmp_path / "state"), [0]).make_dirs()


def test_a_rank_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "state" / "rank0").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="rank0"):
        TaskFiles(str(tmp_path / "state"), [0]).make_dirs()


def test_the_default_state_directory_is_per_user(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    if os.geteuid() == 0:
        # not root's runtime directory (0700): the users whose jobs run as them pass
        # through to their directories in it
        assert default_state_dir() == "/dev/shm/fluxes-exec-0"
    else:
        assert default_state_dir() == str(tmp_path / f"fluxes-exec-{os.getuid()}")


# ------------------------------------------------------------------ jobs run as their owners

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="files given to another user need root")
UID = 54321  # no account needed: only ownership


@as_root
def test_a_users_files_are_in_their_own_directory(tmp_path: Path) -> None:
    f = files(tmp_path)
    job = ExecJob(7, 0, "run", forward="oe", owner=UID, as_user=True)
    task = TaskProc(0, 0, True)
    fd = f.create(job, task, "stdout", "out")
    path = tmp_path / "rank0" / f"u{UID}" / "7.0.out"
    assert task.streams[0].path == str(path)
    assert (path.stat().st_uid, oct(path.stat().st_mode & 0o777)) == (UID, "0o600")
    user_dir = path.parent
    assert (user_dir.stat().st_uid, oct(user_dir.stat().st_mode & 0o777)) == (UID, "0o700")
    os.close(fd)
    assert f.path(0, 7, 0, "st", UID) == str(user_dir / "7.0.st")


@as_root
def test_a_name_the_user_planted_is_never_followed(tmp_path: Path) -> None:
    f = files(tmp_path)
    precious = tmp_path / "precious"
    precious.write_text("root's\n")
    user_dir = Path(f.user_dir(0, UID))
    (user_dir / "7.0.out").symlink_to(precious)  # the user's doing
    job = ExecJob(7, 0, "run", forward="o", owner=UID, as_user=True)
    os.close(f.create(job, TaskProc(0, 0, True), "stdout", "out"))
    assert precious.read_text() == "root's\n"  # not truncated, not given away
    assert precious.stat().st_uid == 0 and not (user_dir / "7.0.out").is_symlink()
    # a restarted worker reopening the file takes only the user's own regular file
    (user_dir / "7.0.out").unlink()
    (user_dir / "7.0.out").symlink_to(precious)
    task = TaskProc(0, 0, False)
    f.attach(job, task, {"stdout": 0})
    assert task.streams[0].fd is None and task.streams[0].done
    (user_dir / "7.0.out").unlink()
    (user_dir / "7.0.out").write_text("not the user's file\n")  # root's, by its owner
    task = TaskProc(0, 0, False)
    f.attach(job, task, {"stdout": 0})
    assert task.streams[0].fd is None


@as_root
def test_a_user_directory_that_is_not_the_users_is_refused(tmp_path: Path) -> None:
    f = files(tmp_path)
    (tmp_path / "rank0" / f"u{UID}").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="must be a directory of uid"):
        f.user_dir(0, UID)
    (tmp_path / "rank2" / f"u{UID}").mkdir()  # root's
    with pytest.raises(ValueError, match="must be a directory of uid"):
        f.user_dir(2, UID)


@as_root
def test_a_users_status_files_settle_only_their_own_jobs(tmp_path: Path) -> None:
    f = files(tmp_path)
    other = UID + 1
    touch(os.path.join(f.user_dir(0, UID), "7.0.st.0"))  # alice's job 7
    touch(os.path.join(f.user_dir(0, other), "8.0.st.0"))  # bob forging one for job 8
    touch(f.path(0, 9, 0, "st.3"))
    assert f.status_code(0, 7, 0, UID) == 0
    assert f.status_code(0, 8, 0, UID) is None and f.status_code(0, 8, 0) is None
    assert f.status_code(0, 8, 0, other) == 0
    assert f.status_code(0, 9, 0) == 3 and f.status_code(0, 9, 0, UID) is None
    assert f.has_files(0, 7, UID) and not f.has_files(0, 7)
    f.sweep(0, {7, 8, 9})  # finished jobs' files go, wherever they are
    assert not f.has_files(0, 7, UID) and not f.has_files(0, 8, other)
    assert not f.has_files(0, 9)
