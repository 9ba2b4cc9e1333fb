"""`slaguard demo`: the work directory is emptied only when an earlier demo made it (it
was deleted whatever it held, so `--workdir ~` would have wiped a home directory), and
`--routing-only` samples the fleet's own models."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.emulator.demo import WORKDIR_MARK, prepare_workdir


def test_a_directory_someone_keeps_things_in_is_refused_and_kept(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["demo", "--workdir", str(tmp_path)])
    assert result.exit_code == 2 and result.stderr == (
        f"error: --workdir: {tmp_path} is not empty and was not made by the demo; fix: pass a "
        "new or empty directory (the demo empties its work directory first)\n"
    )
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_the_demos_own_directory_is_emptied_and_a_new_one_made(tmp_path: Path) -> None:
    work = tmp_path / "demo"
    prepare_workdir(work)
    assert [p.name for p in work.iterdir()] == [WORKDIR_MARK]
    (work / "audit.db").write_text("an earlier run")
    prepare_workdir(work)
    assert [p.name for p in work.iterdir()] == [WORKDIR_MARK]
    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_workdir(empty)
    assert (empty / WORKDIR_MARK).is_file()


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
