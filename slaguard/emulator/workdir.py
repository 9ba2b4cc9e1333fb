"""The demo's work directory: where it keeps its audit DB, configs and logs, locked by the
demo and the processes it starts until the last of them exits."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from slaguard.emulator.stack import command_of

WORKDIR_MARK = ".slaguard-demo"
"""Left in the demo's work directory: the only kind of non-empty directory it empties."""
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "slaguard-demo"
"""The demo's own place, emptied whatever is in it (earlier demos left no mark)."""
LOCK_FILE = ".slaguard-demo.lock"
"""Locked (flock) by the demo using the directory, for its whole run, and by the processes
it started (they inherit the descriptor) until the last exits; holds the demo's pid."""


@contextlib.contextmanager
def claimed_workdir(workdir: Path, say: Callable[[str], None]) -> Iterator[int]:
    """The work directory for one run, held until the end: created (0700), or emptied
    when an earlier demo made it, saying so (an earlier run's audit DB went silently).
    Refused (RuntimeError) while another demo uses it (two demos in one directory emptied
    each other's) or a process an earlier one started still does, any other non-empty
    directory rather than delete what someone keeps there, and a directory someone else
    could write to. Yields the lock's descriptor, for the demo's processes to inherit:
    the lock went with the demo, and the next one emptied the directory under a process
    still writing there."""
    _refuse_foreign(workdir)
    ours = (workdir / WORKDIR_MARK).is_file() or workdir == DEFAULT_WORKDIR
    # a run stopped between its lock and its mark left the lock file alone
    if not ours and workdir.is_dir() and any(e.name != LOCK_FILE for e in workdir.iterdir()):
        raise RuntimeError(
            f"--workdir: {workdir} is not empty and was not made by the demo; fix: pass "
            "a new or empty directory (the demo empties its work directory first)"
        )
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _refuse_foreign(workdir)  # made by someone else between the check and the mkdir
    lock = _lock(workdir)
    try:
        previous = [e for e in workdir.iterdir() if e.name not in (LOCK_FILE, WORKDIR_MARK)]
        if previous:
            say(f"removing the previous demo run in {workdir}")
        for entry in previous:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (workdir / WORKDIR_MARK).write_text("made by `slaguard demo`; emptied by the next run\n")
        yield lock
    finally:
        os.close(lock)


def _lock(workdir: Path) -> int:
    """An exclusive lock on the work directory's lock file, with our pid in it for the
    next demo's refusal. The file is never deleted: a demo that deleted it could lock a
    new file while another still held the old one."""
    fd = os.open(workdir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if not isinstance(exc, BlockingIOError):  # ENOLCK, EOPNOTSUPP: no flock here
            os.close(fd)
            raise RuntimeError(
                f"--workdir: cannot lock {workdir} ({exc.strerror}); fix: pass --workdir "
                "on a local filesystem"
            ) from None
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        users = _users(workdir / LOCK_FILE)
        if holder.isdigit() and users and int(holder) not in users:
            raise RuntimeError(_left_by(int(holder), users, workdir)) from None
        pid = f" (pid {holder})" if holder.isdigit() else ""  # empty: it is writing its pid
        raise RuntimeError(
            f"another demo{pid} is using {workdir}; fix: wait for it or pass --workdir DIR"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _users(lock_file: Path) -> list[int]:
    """The other processes with `lock_file` open: the demo and the processes it started
    (they inherit the lock). Empty where there is no /proc to tell."""
    path = str(lock_file.resolve())  # as /proc shows it: a parent may be a symbolic link
    users = []
    for fds in Path("/proc").glob("[0-9]*/fd"):
        if fds.parent.name != str(os.getpid()) and path in _links(fds):
            users.append(int(fds.parent.name))
    return sorted(users)


def _links(fds: Path) -> set[str]:
    """What a process's descriptors point to, as far as we may read them."""
    links = set()
    with contextlib.suppress(OSError):  # gone, or not ours to read
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                links.add(os.readlink(fd))
    return links


def _left_by(demo: int, users: list[int], workdir: Path) -> str:
    """The refusal when the demo that locked `workdir` is gone and processes it started
    still hold the lock: each named, with the command that ends them."""
    named = ", ".join(
        f"pid {pid}" + (f" ({cmd})" if (cmd := command_of(pid)) else "") for pid in users
    )
    them = "it" if len(users) == 1 else "them"
    return (
        f"an earlier demo (pid {demo}) is gone but left {named} using {workdir}; fix: wait "
        f"for {them} to exit or `kill {' '.join(map(str, users))}`, or pass --workdir DIR"
    )


def _refuse_foreign(workdir: Path) -> None:
    """The default work directory has a predictable name in the shared temp directory:
    another local user could make it first, writable, and swap the `serve.yaml` the
    demo's `serve` reads (the demo often runs as root). Only a directory of our own that
    no one else can write to is used; a symbolic link is not followed."""
    try:
        st = workdir.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise RuntimeError(
            f"--workdir: {workdir} is a symbolic link; fix: pass the directory it points to"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"--workdir: {workdir} is a file; fix: pass a directory")
    if st.st_uid != os.geteuid():
        raise RuntimeError(
            f"--workdir: {workdir} belongs to another user (uid {st.st_uid}); fix: remove "
            "it or pass a directory of your own"
        )
    if st.st_mode & 0o022:
        raise RuntimeError(
            f"--workdir: {workdir} is writable by group or others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); fix: `chmod go-w {workdir}` or pass another "
            "directory"
        )
