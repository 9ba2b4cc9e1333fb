"""A real process that outlives SIGKILL, as one blocked in the kernel (state D, on a hung
disk or NFS) does: traced with PTRACE_O_TRACEEXIT, it stops on its way out, still in
its process group, until the tracer lets it go. Linux only."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Iterator

_PTRACE_CONT = 7
_PTRACE_SEIZE = 0x4206
_PTRACE_O_TRACEEXIT = 0x40
_WALL = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long


def _ptrace(request: int, pid: int, data: int) -> None:
    if _libc.ptrace(request, pid, None, ctypes.c_void_p(data)) == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"ptrace({request:#x}, {pid}): {os.strerror(errno)}")


@contextlib.contextmanager
def held_at_exit(pid: int) -> Iterator[None]:
    """Meanwhile `pid` cannot exit, SIGKILL or not; afterwards it is killed. Call from the
    thread that leaves the context: ptrace belongs to one thread."""
    _ptrace(_PTRACE_SEIZE, pid, _PTRACE_O_TRACEEXIT)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, _WALL)  # its stop on the way out
        if os.WIFSTOPPED(status):
            _ptrace(_PTRACE_CONT, pid, 0)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, _WALL)
