"""The demo's closing "where to look" commands work when pasted: they began with a bare
`slaguard`, not on PATH after `make demo` (which runs .venv/bin/slaguard), Rich broke
them at the terminal's width, and `status`, `history`, `incidents` and `resume` were not
given the demo's audit DB (README's `slaguard status` then failed: no ./slaguard.db)."""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

import slaguard
from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.emulator.demo import CARDS, MODEL, slaguard_command, where_to_look

ROOT = str(Path(slaguard.__file__).resolve().parents[1])
MODULE_MAIN = str(Path(slaguard.__file__).with_name("__main__.py"))


def test_the_command_is_the_slaguard_running_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / ".venv" / "bin" / "slaguard"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [".venv/bin/slaguard", "demo"])  # as `make demo` runs it
    assert slaguard_command() == [str(script)]
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin")  # installed where PATH finds it
    assert slaguard_command() == ["slaguard"]
    monkeypatch.setattr(sys, "argv", [MODULE_MAIN, "demo"])  # python -m slaguard demo
    assert slaguard_command() == [sys.executable, "-m", "slaguard"]


@pytest.mark.slow  # real processes
def test_every_printed_command_runs_as_pasted_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "the demo"  # a space: each path is quoted for the shell
    workdir.mkdir()
    engine = create_audit_engine(f"sqlite:///{workdir / 'audit.db'}")
    upgrade(engine)
    engine.dispose()
    targets = [  # nothing listens there: each target its own backend's address
        {"id": f"{c}-8b", "model": MODEL, "card": c, "url": f"http://127.0.0.1:{9 + i}"}
        for i, c in enumerate(CARDS)
    ]
    (workdir / "fleet.yaml").write_text(yaml.safe_dump({"name": "demo", "targets": targets}))
    monkeypatch.setattr(sys, "argv", [MODULE_MAIN, "demo"])
    out = io.StringIO()
    where_to_look(workdir, Console(file=out, width=60))
    lines = out.getvalue().splitlines()
    db = shlex.quote(str(workdir / "audit.db"))
    assert f"(`export SLAGUARD_DB={db}` stands for every --db below)" in lines[2]
    commands = [line.split(": ", 1)[1] for line in lines[3:] if " --db " in line]
    assert [shlex.split(c)[3] for c in commands] == [
        "status", "history", "incidents", "audit", "resume"
    ]  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in commands:
        argv = shlex.split(command)
        assert argv[:3] == [sys.executable, "-m", "slaguard"]
        assert argv[argv.index("--db") + 1] == str(workdir / "audit.db")
        done = subprocess.run(
            argv,
            cwd=elsewhere,
            env={**os.environ, "PYTHONPATH": ROOT},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stderr)


def test_a_relative_work_directory_is_printed_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--workdir demo2` printed `--db demo2/audit.db`, which fails pasted anywhere else."""
    workdir = tmp_path / "demo2"
    workdir.mkdir()
    engine = create_audit_engine(f"sqlite:///{workdir / 'audit.db'}")
    upgrade(engine)
    engine.dispose()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [MODULE_MAIN, "demo"])
    out = io.StringIO()
    where_to_look(Path("demo2"), Console(file=out, width=60))
    lines = out.getvalue().splitlines()[2:]
    assert f"(`export SLAGUARD_DB={workdir / 'audit.db'}`" in lines[0]
    commands = [shlex.split(line.split(": ", 1)[1]) for line in lines[1:] if " --db " in line]
    assert len(commands) == 5
    for argv in commands:
        assert argv[argv.index("--db") + 1] == str(workdir / "audit.db")
    shown = {line.split(":", 1)[0].strip(): line.split(": ", 1)[1] for line in lines[-3:]}
    assert shown == {
        "fleet file": str(workdir / "fleet.yaml"),
        "logs": f"{workdir}/*.log",
        "metrics": f"{workdir / 'metrics.txt'} (the last /metrics scrape)",
    }
