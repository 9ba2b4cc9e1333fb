"""Run in front of each process the demo starts, so that it dies with the demo.

The demo's processes run in sessions of their own (the terminal's signals reach the demo
alone), so a demo that died without its stop (SIGKILL, a crash) left them running for
good, ports open. On Linux this sets `PR_SET_PDEATHSIG`: SIGTERM (serve then drains its
audit writer) once the thread that forked it exits; the demo forks from its main thread,
so that is the demo's end. Then it becomes the program it was given (exec: same pid, the
program's own command line). A program and not a `preexec_fn`: code between fork and
exec in a parent with threads can deadlock.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def tethered(argv: list[str]) -> list[str]:
    """`argv`, to be started by this process, as a command that gets SIGTERM when the
    thread starting it exits (Linux; elsewhere `argv` as it is)."""
    if sys.platform != "linux":
        return argv
    return [sys.executable, "-m", "slaguard.emulator.tether", str(os.getpid()), *argv]


def main(parent: int, argv: list[str]) -> None:
    """Arm the death signal, then become `argv`; not at all when `parent` is gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    if os.getppid() != parent:  # it died before the prctl: no signal will come
        sys.exit(
            f"error: the demo (pid {parent}) exited before this process started; not starting it"
        )
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
