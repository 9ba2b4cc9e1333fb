"""A command loads only what it needs: `slaguard rollback` mid-incident imported pandas,
FastAPI, the simulator and Alembic first (3 s on a 2-core VM, `bench/cli_startup.py`).

Asserted on what a fresh process has imported when the command is done, not on time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import head_revision, upgrade
from slaguard.audit.schema import SCHEMA_REVISION, is_current
from slaguard.cli.main import COMMANDS, app, load_command

runner = CliRunner()

HEAVY = ("pandas", "fastapi", "uvicorn", "alembic", "slaguard.sim.engine", "matplotlib")
PROBE = """
import json, sys
from slaguard.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(m for m in sys.modules
                  if m.split(".")[0] in {h.split(".")[0] for h in HEAVY} and
                  any(m == h or m.startswith(h + ".") for h in HEAVY))}), file=sys.stderr)
"""


def _loaded_by(args: list[str], cwd: Path) -> tuple[int, list[str]]:
    """(exit code, heavy modules imported) of `slaguard ARGS` in a fresh interpreter."""
    code = f"HEAVY = {HEAVY!r}\nimport sys\nsys.argv = ['slaguard', *{args!r}]\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=False
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["loaded"]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "audit.db"
    upgrade(create_audit_engine(f"sqlite:///{path}"))
    return path


@pytest.mark.parametrize(
    ("args", "allowed"),
    [
        (["--help"], ()),
        (["rollback", "--reason", "drill"], ()),
        (["resume"], ()),
        (["fleet", "show"], ()),
        (["status"], ()),
        (["incidents"], ("pandas",)),
        (["db", "current"], ("alembic",)),
    ],
)
def test_a_command_imports_only_what_it_needs(
    db: Path, args: list[str], allowed: tuple[str, ...]
) -> None:
    needs_db = args[0] in ("rollback", "resume", "status", "incidents", "db")
    code, loaded = _loaded_by([*args, "--db", str(db)] if needs_db else args, db.parent)
    assert code in (0, None)
    assert [m for m in loaded if m.split(".")[0] not in allowed] == []


def test_the_help_lists_each_command_with_its_own_summary() -> None:
    listed = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0
    for name, entry in COMMANDS.items():
        command = load_command(name, entry)
        own = (command.help or "").strip().splitlines()[0]
        assert entry.summary == own, name
        assert f"{name}  " in listed.output and entry.summary in listed.output


def test_every_subcommand_of_a_sub_app_is_reachable() -> None:
    """Loaded one at a time, each sub-app keeps its subcommands (a one-command Typer app
    became a bare command, and `slaguard fleet show` an unknown argument)."""
    for name in ("fleet", "db", "audit", "dashboards"):
        group = load_command(name, COMMANDS[name])
        assert isinstance(group, typer.core.TyperGroup), name
        for sub in group.list_commands(typer.Context(group)):
            result = runner.invoke(app, [name, sub, "--help"])
            assert result.exit_code == 0, f"{name} {sub}: {result.output}"
            assert "--install-completion" not in result.output


def test_a_mistyped_command_is_answered_with_the_right_one() -> None:
    result = runner.invoke(app, ["statu"])
    assert result.exit_code == 2
    assert "did you mean 'status'?" in result.output


def test_the_schema_revision_the_code_expects_is_the_newest_migration(tmp_path: Path) -> None:
    assert head_revision() == SCHEMA_REVISION
    engine = create_audit_engine(f"sqlite:///{tmp_path / 'a.db'}")
    assert not is_current(engine)
    upgrade(engine, "0001_audit_log")
    assert not is_current(engine)
    upgrade(engine)
    assert is_current(engine)
