"""The demo's work directory: where it keeps its audit DB, configs and logs."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

WORKDIR_MARK = ".slaguard-demo"
"""Left in the demo's work directory: the only kind of non-empty directory it empties."""
DEFAULT_WORKDIR = Path(tempfile.gettempdir()) / "slaguard-demo"
"""The demo's own place, emptied whatever is in it (earlier demos left no mark)."""


def prepare_workdir(workdir: Path) -> None:
    """Empty a work directory an earlier demo made, or create it (0700); refuse
    (RuntimeError) any other non-empty directory rather than delete what someone keeps
    there, and a directory someone else could write to."""
    _refuse_foreign(workdir)
    if workdir.is_dir() and any(workdir.iterdir()):
        if not (workdir / WORKDIR_MARK).is_file() and workdir != DEFAULT_WORKDIR:
            raise RuntimeError(
                f"--workdir: {workdir} is not empty and was not made by the demo; fix: pass "
                "a new or empty directory (the demo empties its work directory first)"
            )
        shutil.rmtree(workdir)
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _refuse_foreign(workdir)  # made by someone else between the check and the mkdir
    (workdir / WORKDIR_MARK).write_text("made by `slaguard demo`; emptied by the next run\n")


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
