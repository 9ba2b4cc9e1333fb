"""`slaguard audit` on a generated run: every subcommand, every format, and bad input
answered with one `error:` line and exit 2."""

from __future__ import annotations

import io
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from slaguard.audit.engine import create_audit_engine
from slaguard.audit.migrate import upgrade
from slaguard.audit.sample import SICK_TARGET, load_run, synthetic_run
from slaguard.audit.timeargs import TIME_HELP, parse_time
from slaguard.cli.main import app

START_S = 1_796_000_000.0
RUN = synthetic_run(1500, start_s=START_S, seed=21)
WINDOW = ["--since", "2026-11-30T00:53:20Z", "--until", "2026-11-30T01:53:20Z"]
runner = CliRunner()


def run_db(tmp: Path) -> str:
    """`RUN` loaded into a SQLite file under `tmp`; its path."""
    engine = create_audit_engine(f"sqlite:///{tmp / 'audit.db'}")
    upgrade(engine)
    load_run(engine, RUN, tmp / "spill")
    engine.dispose()
    return str(tmp / "audit.db")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    return run_db(tmp_path_factory.mktemp("cli"))


def ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    return result.stderr


def test_decisions_in_every_format(db: str, tmp_path: Path) -> None:
    table = ok("audit", "decisions", "--db", db, *WINDOW, "--target", SICK_TARGET)
    want = [d.request_id for d in RUN.decisions if d.target_id == SICK_TARGET]
    assert want[0] in table and f"({len(want)} rows)" in table
    csv = pd.read_csv(io.StringIO(ok("audit", "decisions", "--db", db, *WINDOW, "-f", "csv",
                                     "--target", SICK_TARGET)))  # fmt: skip
    assert list(csv["request_id"]) == want
    assert {"explanation"}.isdisjoint(csv.columns) and "ttft_s" in csv.columns
    cut = runner.invoke(
        app, ["audit", "decisions", "--db", db, *WINDOW, "-f", "json", "--limit", "7"]
    )
    rows = json.loads(cut.stdout)
    assert len(rows) == 7 and rows[0]["decided_at"].startswith("2026-11-30T00:5")
    # a cut answer says so (an export of the first 1,000 rows looked like all of them)
    assert cut.stderr == "note: the first 7 decisions; --limit 0 for all of them\n"
    out = tmp_path / "d.parquet"
    ok("audit", "decisions", "--db", db, *WINDOW, "-f", "parquet", "-o", str(out), "--limit", "0")
    assert len(pd.read_parquet(out)) == len(RUN.decisions)
    # without --format the file's extension says it (it was refused: "add --format")
    for name, read in (("e.parquet", pd.read_parquet), ("e.CSV", pd.read_csv)):
        ok("audit", "decisions", "--db", db, *WINDOW, "-o", str(tmp_path / name), "--limit", "0")
        assert len(read(tmp_path / name)) == len(RUN.decisions)
    ok("history", "--db", db, "--since", "2026-11-29", "-o", str(tmp_path / "h.json"))
    assert isinstance(json.loads((tmp_path / "h.json").read_text()), list)
    filters = ["--policy", "learned", "--mode", "rollout(50)", "--limit", "0"]
    learned = json.loads(ok("audit", "decisions", "--db", db, *WINDOW, "-f", "json", *filters))
    assert {r["policy_arm"] for r in learned} == {"learned"}
    assert len(learned) == sum(
        d.policy_arm == "learned" and d.fleet_mode == "rollout(50)" for d in RUN.decisions
    )


def test_one_is_counted_in_the_singular(db: str) -> None:
    """`note: the first 1 decisions`, headed `(1 rows)`."""
    one = runner.invoke(app, ["audit", "decisions", "--db", db, *WINDOW, "--limit", "1"])
    assert one.exit_code == 0 and "UTC (1 row) " in one.stdout
    assert one.stderr == "note: the first decision; --limit 0 for all of them\n"


def test_policy_takes_the_arm_spelt_as_simulate_spells_it(db: str) -> None:
    """`round-robin` (as `simulate --policy` spells it) was refused as an unknown arm."""
    args = ("audit", "decisions", "--db", db, *WINDOW, "-f", "csv", "--limit", "0")
    dashed = ok(*args, "--policy", "round-robin")
    assert dashed == ok(*args, "--policy", "round_robin")
    assert set(pd.read_csv(io.StringIO(dashed))["policy_arm"]) == {"round_robin"}


@pytest.mark.parametrize("dashed", ["held-round-robin", "round-robin"])
def test_mode_takes_the_hyphen_spelling_as_policy_does(db: str, dashed: str) -> None:
    """`--policy round-robin` was taken, `--mode round-robin` refused as an unknown mode."""
    args = ("audit", "decisions", "--db", db, *WINDOW, "-f", "csv", "--limit", "0")
    stored = dashed.replace("-", "_")
    answer = ok(*args, "--mode", dashed)
    assert answer == ok(*args, "--mode", stored)
    held = [d for d in RUN.decisions if d.fleet_mode == stored]  # RUN has no round_robin
    assert len(pd.read_csv(io.StringIO(answer))) == len(held)


def test_explain_shows_candidates_rejections_and_weights(db: str) -> None:
    rec = next(d for d in RUN.decisions if d.target_id is not None)
    table = ok("audit", "explain", rec.request_id, "--db", db)
    for needle in ("eligible candidates", "rejected targets", "memory bound", rec.fleet_mode,
                   rec.weights_version, "interconnect", "outcome"):  # fmt: skip
        assert needle in table, needle
    payload = json.loads(ok("audit", "explain", rec.request_id, "--db", db, "-f", "json"))
    assert payload["decision"]["target_id"] == rec.target_id
    assert payload["candidates"][0]["target"] == rec.target_id
    assert payload["weights"]["compute"] == 0.3
    csv = pd.read_csv(io.StringIO(ok("audit", "explain", rec.request_id, "--db", db, "-f", "csv")))
    assert csv.iloc[0]["target"] == rec.target_id


def test_summary_table_and_csv(db: str) -> None:
    assert "capacity_share" in ok("audit", "summary", "--db", db, *WINDOW)
    frame = pd.read_csv(io.StringIO(ok("audit", "summary", "--db", db, *WINDOW, "-f", "csv")))
    assert frame["decisions"].sum() == len(RUN.decisions)
    assert set(frame["policy_arm"]) == {"learned", "round_robin"}


def test_shares_on_a_fleet_file_that_lacks_the_targets_are_flagged(db: str, tmp_path: Path) -> None:
    """The run was routed on the built-in fleet: its shares need no warning; a fleet file
    holding one of its 19 targets (a service run elsewhere) leaves 18 shares blank and
    says so, naming the fix."""
    quiet = runner.invoke(app, ["audit", "summary", "--db", db, *WINDOW, "-f", "csv"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    other = tmp_path / "other.yaml"
    other.write_text("targets:\n  - {id: h200-8b, model: llama3.1-8b, card: h200}\n")
    for args in (["summary", *WINDOW], ["incident", "1"]):
        result = runner.invoke(app, ["audit", *args, "--db", db, "--fleet", str(other)])
        assert result.exit_code == 0, result.output
        assert result.stderr.startswith(
            f"warning: capacity shares are computed on {other}, which lacks 18 of these "
            "targets (a100-70b, a100-8b, ascend-70b, ascend-8b-0 and 14 more); pass --fleet"
        ), result.stderr
    frame = pd.read_csv(io.StringIO(runner.invoke(
        app, ["audit", "summary", "--db", db, *WINDOW, "-f", "csv", "--fleet", str(other)]
    ).stdout))  # fmt: skip
    known = frame[frame["target_id"] == "h200-8b"]
    assert (known["capacity_share"] == 1.0).all() and frame["capacity_share"].isna().sum() > 0


def test_shares_of_a_target_the_fleet_file_puts_on_another_card_are_flagged(
    db: str, tmp_path: Path
) -> None:
    """A target moved to another card since kept the new card's share, silently (an
    L40S's rows read the H100's 0.43 instead of 0.14)."""
    moved = tmp_path / "moved.yaml"
    moved.write_text(
        "targets:\n  - {id: h200-8b, model: llama3.1-8b, card: h100}\n"
        "  - {id: h100-8b-0, model: llama3.1-8b, card: h100}\n"
    )
    args = ["audit", "summary", "--db", db, *WINDOW, "-f", "csv", "--fleet", str(moved)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "puts 1 on another card (h200-8b (h200 in the database, h100 in the file))" in (
        result.stderr
    )
    frame = pd.read_csv(io.StringIO(result.stdout))
    assert frame[frame["target_id"] == "h200-8b"]["capacity_share"].isna().all()
    assert (frame[frame["target_id"] == "h100-8b-0"]["capacity_share"] == 0.5).all()


def test_incident_timeline_and_plot(db: str, tmp_path: Path) -> None:
    png = tmp_path / "incident.png"
    result = runner.invoke(app, ["audit", "incident", "1", "--db", db, "--plot", str(png)])
    assert result.exit_code == 0, result.output
    for needle in ("ttft_zscore", "held_round_robin", "before", "during", "after", SICK_TARGET):
        assert needle in result.stdout, needle
    assert f"plot written to {png}" in result.stderr
    image = matplotlib.image.imread(png)
    assert image.shape[:2] == (600, 1200)
    payload = json.loads(ok("audit", "incident", "1", "--db", db, "-f", "json", "--before", "10m"))
    assert [m["to_mode"] for m in payload["mode_changes"]] == ["held_round_robin", "rollout(50)"]
    assert payload["incident"]["evidence"]["target"] == SICK_TARGET
    sick = [r for r in payload["per_target"] if r["target_id"] == SICK_TARGET]
    by_phase = {r["phase"]: r["ttft_p99_s"] for r in sick}
    assert by_phase["during"] > 4 * by_phase["before"]


@pytest.fixture
def old_db(tmp_path: Path) -> tuple[str, int]:
    now = time.time()
    run = synthetic_run(300, start_s=now - 31 * 86400, duration_s=2 * 86400, seed=4)
    engine: Engine = create_audit_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(engine)
    load_run(engine, run, tmp_path / "spill")
    engine.dispose()
    older = sum(d.decided_at_s < now - 30 * 86400 for d in run.decisions)
    return str(tmp_path / "old.db"), older


def test_prune_with_relative_retention(old_db: tuple[str, int]) -> None:
    db, older = old_db
    assert 50 < older < 250
    dry = ok("audit", "prune", "--older-than", "30d", "--dry-run", "--db", db)
    assert dry.startswith(f"would delete {older} decisions and {older} outcomes older than")
    assert ok("audit", "prune", "--older-than", "30d", "--db", db).startswith(f"deleted {older}")
    left = json.loads(ok("audit", "decisions", "--db", db, "--since", "-40d", "--until", "now",
                         "-f", "json", "--limit", "0"))  # fmt: skip
    assert len(left) == 300 - older


def test_bad_input_gets_one_line_and_exit_2(db: str, tmp_path: Path) -> None:
    assert (
        "no decision with request id 'nope'; fix: `slaguard audit decisions --since -1h` "
        "lists request ids (an earlier --since for older ones)"
        in one_line_error("audit", "explain", "nope", "--db", db)
    )
    ids = [i["id"] for i in json.loads(ok("incidents", "--db", db, "-f", "json"))]
    assert ids == [1], "the fixture's run stores one incident"
    assert (  # it said "ids 1-1"
        "no incident with id 42; fix: `slaguard incidents` lists the ids (this database "
        "holds id 1)\n"
    ) in one_line_error("audit", "incident", "42", "--db", db)
    huge = str(2**63)  # SQLite's driver raised OverflowError, PostgreSQL 'integer out of range'
    assert f"no incident with id {huge}" in one_line_error("audit", "incident", huge, "--db", db)
    assert "--db: cannot read 'postgresql+psycopg://u@127.0.0.1:notaport/x' as a database" in (
        one_line_error("audit", "summary", "--db", "postgresql+psycopg://u@127.0.0.1:notaport/x")
    )
    assert "--since: cannot read 'yesterday'" in one_line_error(
        "audit", "decisions", "--db", db, "--since", "yesterday"
    )
    assert "--since: '1h' is a duration, not a time; fix: write -1h for 1h before now" in (
        one_line_error("audit", "summary", "--db", db, "--since", "1h")
    )
    inverted = one_line_error("audit", "summary", "--db", db, "--since", "-1h", "--until", "-2h")
    assert "is not before --until" in inverted
    assert inverted.endswith("; fix: swap them or widen the range\n")
    assert f"--since: cannot read '-2x'; fix: use {TIME_HELP}\n" in one_line_error(
        "audit", "decisions", "--db", db, "--since", "-2x"
    )
    assert "--before: cannot read '0s' as a positive duration; fix: use e.g." in one_line_error(
        "audit", "incident", "1", "--before", "0s", "--db", db
    )
    equal = one_line_error("history", "--db", db, "--since", "now")
    assert "--since 'now' and --until 'now' are the same time (" in equal
    assert equal.endswith("); fix: widen the range\n") and "swap" not in equal
    assert "--older-than: cannot read '30 days ago'" in one_line_error(
        "audit", "prune", "--older-than", "30 days ago", "--db", db
    )
    # pandas reads a bare number as nanoseconds: this prune deleted every row
    assert "--older-than: cannot read '30' as a duration; fix: write a number and a unit" in (
        one_line_error("audit", "prune", "--older-than", "30", "--db", db)
    )
    assert "--before: cannot read '1ms' as a duration" in one_line_error(
        "audit", "incident", "1", "--before", "1ms", "--db", db
    )
    # pandas read 02/03/2026 US-style (3 February), silently
    assert one_line_error("audit", "decisions", "--db", db, "--since", "02/03/2026") == (
        f"error: --since: cannot read '02/03/2026' as a time; fix: use {TIME_HELP}; dates are "
        "YYYY-MM-DD (slashes put day and month in either order)\n"
    )
    # pandas reads 'today' as this machine's local time, which was then labelled UTC
    assert "--since: cannot read 'today' as a time" in one_line_error(
        "audit", "decisions", "--db", db, "--since", "today"
    )
    assert "--mode: unknown fleet mode 'rollout(ten)'; fix: use " in one_line_error(
        "audit", "decisions", "--db", db, "--mode", "rollout(ten)"
    )
    # a resume --stage 30 enters rollout(30): the answer listed the plan's stages only
    assert "or rollout(N) with N in 1..100 (the plan's stages" in one_line_error(
        "audit", "decisions", "--db", db, "--mode", "rollout(0)"
    )
    # past 2**63 SQLite's driver raised OverflowError (a traceback)
    for limit in ("99999999999999999999", "-1"):
        assert one_line_error("audit", "decisions", "--db", db, "--limit", limit) == (
            f"error: --limit: {limit} is not in 0..1,000,000,000; give a row count, or 0 for all\n"
        )
    assert "--policy: unknown arm 'random'" in one_line_error(
        "audit", "decisions", "--db", db, "--policy", "random"
    )
    assert "add --output FILE.parquet" in one_line_error(
        "audit", "summary", "--db", db, "-f", "parquet"
    )
    assert one_line_error("audit", "summary", "--db", db, "-o", str(tmp_path / "s.txt")) == (
        "error: --output: s.txt does not say its format; fix: add --format csv, json or "
        "parquet, or end the file name in .csv, .json or .parquet\n"
    )
    assert "--output: the table is for the terminal; add --format csv" in one_line_error(
        "audit", "summary", "--db", db, "-f", "table", "-o", str(tmp_path / "s.txt")
    )
    assert f"--output: {db} is not a directory" in one_line_error(
        "audit", "summary", "--db", db, "-f", "csv", "-o", f"{db}/s.csv"
    )
    # a write that fails half-way (here a full disk) was a traceback
    assert "--output: cannot write /dev/full: No space left on device" in one_line_error(
        "audit", "summary", "--db", db, *WINDOW, "-f", "json", "-o", "/dev/full"
    )
    assert one_line_error(
        "audit", "incident", "1", "--db", db, "--plot", str(tmp_path / "x.jpg")
    ) == (
        f"error: --plot: {tmp_path / 'x.jpg'} is not a .png file (the plot is written as PNG "
        f"only); fix: name a .png file, e.g. --plot {tmp_path / 'x.png'}\n"
    )
    assert "cannot reach database postgresql+psycopg://postgres@127.0.0.1:1/x" in one_line_error(
        "audit", "summary", "--db", "postgresql+psycopg://postgres@127.0.0.1:1/x"
    )
    assert "does not exist" in one_line_error(
        "audit", "decisions", "--db", str(tmp_path / "missing.db")
    )


@pytest.mark.postgres
def test_the_same_commands_work_on_postgres(pg_audit_engine: Engine, tmp_path: Path) -> None:
    load_run(pg_audit_engine, RUN, tmp_path / "spill")
    url = pg_audit_engine.url.render_as_string(hide_password=False)
    frame = pd.read_csv(io.StringIO(ok("audit", "summary", "--db", url, *WINDOW, "-f", "csv")))
    assert frame["decisions"].sum() == len(RUN.decisions)
    assert "held_round_robin" in ok("audit", "incident", "1", "--db", url)
    _assert_an_empty_window_is_an_empty_answer(url)
    typos = ["--target", "l40s-8b-O", "--model", "llama-3.1-8b"]
    result = runner.invoke(app, ["audit", "decisions", "--db", url, *WINDOW, *typos])
    assert result.exit_code == 0, result.output
    assert "(known: l40s-8b-0, l40s-8b-1, l40s-8b-2, l40s-8b-3 and 15 more)" in result.stderr
    assert "(known: llama3.1-8b, llama3.1-70b)\n" in result.stderr


EMPTY = ["--since", "2020-01-01", "--until", "2020-01-02"]


def _assert_an_empty_window_is_an_empty_answer(db: str) -> None:
    table = ok("audit", "summary", "--db", db, *EMPTY)
    assert "summary 2020-01-01 00:00:00 .. 2020-01-02 00:00:00 UTC (0 rows)" in table
    header = "policy_arm,model_id,target_id,card_type,decisions,decision_share"
    assert ok("audit", "summary", "--db", db, *EMPTY, "-f", "csv").startswith(header)
    assert json.loads(ok("audit", "decisions", "--db", db, *EMPTY, "-f", "json")) == []


def test_an_empty_window_is_an_empty_answer_not_a_traceback(db: str, tmp_path: Path) -> None:
    """A window with no decisions (pandas took quantiles of nothing and raised); an
    incident whose decisions were pruned says why its table is empty."""
    _assert_an_empty_window_is_an_empty_answer(db)
    pruned = tmp_path / "pruned.db"
    shutil.copy(db, pruned)
    ok("audit", "prune", "--older-than", "1s", "--db", str(pruned))
    result = runner.invoke(app, ["audit", "incident", "1", "--db", str(pruned)])
    assert result.exit_code == 0 and "held_round_robin" in result.stdout
    assert result.stderr.startswith("note: no decisions 2026-11-30 00:"), result.stderr
    assert result.stderr.endswith("pruned, or routed into another database (--db)\n")


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-03-02", datetime(2026, 3, 2, tzinfo=UTC)),
        ("2026-03-02T14:05Z", datetime(2026, 3, 2, 14, 5, tzinfo=UTC)),
        ("2026-03-02 14:05:09.5", datetime(2026, 3, 2, 14, 5, 9, 500000, tzinfo=UTC)),
        ("2026-03-02T14:05+05:30", datetime(2026, 3, 2, 8, 35, tzinfo=UTC)),
        ("-90m", datetime(2026, 11, 30, 10, 30, tzinfo=UTC)),
        ("now", NOW),
    ],
)
def test_iso_8601_and_relative_times_are_read(text: str, moment: datetime) -> None:
    assert parse_time(text, "--since", NOW) == moment


@pytest.mark.parametrize("text", ["02/03/2026", "2026/03/02", "Mar 2 2026", "20260302", "2 March"])
def test_other_time_forms_are_refused_not_guessed(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"^--until: cannot read '.*' as a time; fix: use ISO 8601"
    ):
        parse_time(text, "--until", NOW)
