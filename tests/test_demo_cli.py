"""`slaguard demo`: the work directory is emptied only when an earlier demo made it (it
was deleted whatever it held, so `--workdir ~` would have wiped a home directory), is
used only when no other user can write to it, and `--routing-only` samples the fleet's own
models."""

from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

import pytest
from helpers import usual_umask
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.emulator.workdir import DEFAULT_WORKDIR, LOCK_FILE, WORKDIR_MARK, claimed_workdir


def test_a_directory_someone_keeps_things_in_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["demo", "--workdir", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr == (
        f"error: --workdir: {tmp_path} is not empty and was not made by the demo; fix: pass a "
        "new or empty directory (the demo empties its work directory first)\n"
    )
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def _claim(workdir: Path) -> list[str]:
    """What claiming `workdir` for a run said."""
    said: list[str] = []
    with claimed_workdir(workdir, said.append):
        pass
    return said


def test_the_demos_own_directory_is_emptied_and_a_new_one_made(tmp_path: Path) -> None:
    """An earlier run's audit DB and incidents went without a word."""
    work = tmp_path / "demo"
    assert _claim(work) == []
    assert sorted(p.name for p in work.iterdir()) == [WORKDIR_MARK, LOCK_FILE]
    assert _claim(work) == []  # nothing of a run in it
    (work / "audit.db").write_text("an earlier run")
    (work / "spill").mkdir()
    assert _claim(work) == [f"removing the previous demo run in {work}"]
    assert sorted(p.name for p in work.iterdir()) == [WORKDIR_MARK, LOCK_FILE]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _claim(empty) == []
    assert (empty / WORKDIR_MARK).is_file()


def _refused(workdir: Path, problem: str) -> None:
    """Refused by the demo's preparation and, as one line, by the CLI; left as it was."""
    before = sorted(p.name for p in workdir.iterdir()) if workdir.is_dir() else None
    with pytest.raises(RuntimeError, match=re.escape(problem)):
        _claim(workdir)
    result = CliRunner().invoke(app, ["demo", "--workdir", str(workdir)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --workdir: {workdir} {problem}")
    assert result.stderr.count("\n") == 1
    assert (sorted(p.name for p in workdir.iterdir()) if workdir.is_dir() else None) == before


def test_a_work_directory_others_can_write_to_is_refused(tmp_path: Path) -> None:
    """Another user made the predictable default first (`mkdir -m 777`); the demo, often
    run as root, used it, and that user could swap the serve.yaml the demo's serve reads."""
    shared = tmp_path / "slaguard-demo"
    shared.mkdir()
    shared.chmod(0o777)
    _refused(shared, "is writable by group or others (mode 0777); fix: `chmod go-w")
    shared.chmod(0o775)
    _refused(shared, "is writable by group or others (mode 0775)")
    (shared / "serve.yaml").write_text("planted")  # refused for that, not for being full
    _refused(shared, "is writable by group or others")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    _refused(link, "is a symbolic link; fix: pass the directory it points to")
    assert not (tmp_path / "elsewhere").exists()


def test_another_users_work_directory_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    theirs = tmp_path / "slaguard-demo"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    _refused(theirs, "belongs to another user (uid 65534); fix: remove it or pass a directory")


def test_a_new_work_directory_is_the_users_only(tmp_path: Path) -> None:
    with usual_umask():
        _claim(tmp_path / "new")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_routing_only_samples_the_fleets_own_models(tmp_path: Path) -> None:
    """The samples were llama requests whatever the fleet: on a qwen fleet every one was
    no_capacity."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("targets:\n  - {id: q, model: qwen2.5-32b, card: h100, tp: 2}\n")
    result = CliRunner().invoke(app, ["demo", "--routing-only", "--fleet", str(fleet)])
    assert result.exit_code == 0, result.output
    lines = [x for x in result.stdout.splitlines() if x.lstrip().startswith("demo-")]
    assert len(lines) == 8  # 3 shapes and one over-long prompt, for each policy
    assert sum("-> q (routed)" in x for x in lines) == 6
    assert sum("(no_capacity)" in x for x in lines) == 2


@pytest.mark.parametrize("given", ["work", "default"])
def test_routing_only_refuses_a_work_directory_it_would_not_use(tmp_path: Path, given: str) -> None:
    """`--routing-only --workdir DIR` printed the samples and dropped --workdir without a
    word, as `--fleet` without --routing-only was before (refused since); so it did when
    DIR was the default directory written out."""
    work = tmp_path / "work" if given == "work" else DEFAULT_WORKDIR
    result = CliRunner().invoke(app, ["demo", "--routing-only", "--workdir", str(work)])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr == (
        "error: --workdir: only for the full demo (--routing-only starts no process and "
        "writes nothing); fix: drop --workdir, or drop --routing-only\n"
    )
    assert given == "default" or not work.exists()


def test_a_directory_holding_only_a_lock_file_is_taken(tmp_path: Path) -> None:
    """A run stopped between taking its lock and writing its mark left the lock file
    alone, and every later run was refused as "not made by the demo"."""
    work = tmp_path / "demo"
    work.mkdir(mode=0o700)
    (work / LOCK_FILE).write_text("")
    assert _claim(work) == []
    assert (work / WORKDIR_MARK).is_file()


def test_a_filesystem_without_flock_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOLCK (an NFS mount without lockd) was a traceback and a leaked descriptor."""

    def no_locks(_fd: int, _op: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    opened = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError, match=r"cannot lock .* \(No locks available\); fix: pass"):
        _claim(tmp_path / "demo")
    assert len(os.listdir("/proc/self/fd")) == opened


def test_a_missing_trace_is_one_line_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the shared data the demo started its backends and serve, then ended in a
    traceback from the load generator."""
    monkeypatch.setenv("SLAGUARD_DATA_DIR", str(tmp_path / "data"))
    work = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--workdir", str(work)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"error: the demo replays the Azure conversation trace, and "
        f"{tmp_path / 'data' / 'azure-llm-2023' / 'AzureLLMInferenceTrace_conv.csv'} does not "
        f"exist: $SLAGUARD_DATA_DIR is '{tmp_path / 'data'}'; fix: point SLAGUARD_DATA_DIR at "
        "the shared data directory"
    )
    assert not work.exists()


def test_a_fleet_for_the_full_demo_is_refused_not_ignored(tmp_path: Path) -> None:
    """The full demo runs its own five backends; `--fleet` was silently dropped, and the
    run that followed looked like one on the user's fleet."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("targets:\n  - {id: q, model: qwen2.5-32b, card: h100, tp: 2}\n")
    work = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "--fleet", str(fleet), "--workdir", str(work)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == (
        "error: --fleet: only with --routing-only (the full demo runs its own five emulated "
        "backends); fix: add --routing-only, or drop --fleet\n"
    )
    assert not work.exists()
