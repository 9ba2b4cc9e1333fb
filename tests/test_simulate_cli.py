"""`slaguard simulate`: the report file, determinism by seed, one-line errors, --policy guarded."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_engine_support import AZURE_FIXTURE, MOONCAKE_FIXTURE, without_wall_time
from test_report_schema import schema_problems
from typer.testing import CliRunner

from slaguard.cli.main import app

runner = CliRunner()
FAULTS = """faults:
  - {kind: jitter, target: l40s, start_s: 5, end_s: 20, factor: 3}
  - {kind: load_spike, start_s: 10, end_s: 20, factor: 2}
"""


def simulate(tmp_path: Path, *args: str, name: str = "report.json") -> dict[str, Any]:
    """Run the command, expect success, return the JSON report it wrote."""
    out = tmp_path / name
    result = runner.invoke(app, ["simulate", *args, "--report-json", str(out)])
    assert result.exit_code == 0, result.output
    assert "SLA violation rate" in result.stdout
    assert f"report written to {out}" in result.stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def one_line_error(*args: str) -> str:
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.fixture
def faults_file(tmp_path: Path) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(FAULTS)
    return path


def test_report_json_is_the_documented_report(tmp_path: Path, faults_file: Path) -> None:
    args = ("--trace", str(AZURE_FIXTURE), "--faults", str(faults_file), "--rate-scale", "2")
    report = simulate(tmp_path, *args, "--policy", "round-robin", "--seed", "3")
    assert schema_problems(report) == []
    assert report["policy"] == "round-robin"
    # the replayed trace: 200 requests plus one copy of each of the 18 in the spike window
    assert report["trace"] == {"path": str(AZURE_FIXTURE), "requests": 218, "duration_s": 61.263537}
    assert report["requests"]["total"] == 218
    assert [f["kind"] for f in report["faults"]] == ["jitter", "load_spike"]
    assert (report["rate_scale"], report["seed"], report["fleet"]) == (2.0, 3, "default-mixed")
    assert report["weights"]["version"].startswith("eg-0-")
    assert len(report["weights"]["values"]) == 5


def test_same_seed_same_numbers_other_seed_other_copies(tmp_path: Path, faults_file: Path) -> None:
    args = ("--trace", str(AZURE_FIXTURE), "--faults", str(faults_file), "--policy", "learned")
    first = simulate(tmp_path, *args, "--seed", "5", name="a.json")
    again = simulate(tmp_path, *args, "--seed", "5", name="b.json")
    other = simulate(tmp_path, *args, "--seed", "6", name="c.json")
    assert without_wall_time(first) == without_wall_time(again)
    assert first["wall_s"] > 0 and first["decision_latency_s"]["p50"] > 0
    assert without_wall_time(first) != without_wall_time(other)


def test_mooncake_trace_by_content_and_duration_cut(tmp_path: Path) -> None:
    report = simulate(tmp_path, "--trace", str(MOONCAKE_FIXTURE), "--duration", "30")
    assert report["trace"]["requests"] == report["requests"]["total"] == 92
    assert report["trace"]["duration_s"] <= 30.0


def test_rollout_stages_follow_the_stage_options(tmp_path: Path) -> None:
    report = simulate(
        tmp_path,
        *("--trace", str(AZURE_FIXTURE), "--policy", "rollout"),
        *("--baseline-s", "6", "--stage-s", "4"),
    )
    modes = [(m["at_s"], m["mode"]) for m in report["guard"]["mode_timeline"]]
    assert modes == [
        (0.0, "round_robin"),
        (6.0, "rollout(10)"),
        (10.0, "rollout(50)"),
        (14.0, "rollout(100)"),
        (18.0, "learned"),
    ]


def test_policy_takes_the_arm_spelt_as_the_audit_database_spells_it(tmp_path: Path) -> None:
    """`round_robin` (as `audit decisions --policy` and the database spell it) was refused."""
    args = ("--trace", str(AZURE_FIXTURE), "--duration", "10")
    report = simulate(tmp_path, *args, "--policy", "round_robin")
    assert report["policy"] == "round-robin"


def test_guarded_is_refused_clearly_or_reports_a_guard(tmp_path: Path) -> None:
    """Flips by itself when the guard is wired in: then the report needs its guard section."""
    out = tmp_path / "guarded.json"
    args = ["simulate", "--trace", str(AZURE_FIXTURE), "--policy", "guarded"]
    result = runner.invoke(app, [*args, "--report-json", str(out)])
    if result.exit_code == 0:
        report = json.loads(out.read_text())
        assert schema_problems(report) == []
        assert report["policy"] == "guarded"
        assert report["guard"]["mode_timeline"][0]["at_s"] == 0.0
        return
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "--policy guarded" in result.stderr and "guard" in result.stderr
    assert "rollout" in result.stderr, "the message names what to use instead"
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("when,prompt\n1,2\n", "cannot tell the trace format"),
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,3\n", "GeneratedTokens"),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,many,3\n",
            ":2:",
        ),
        ("", "empty"),
        # Python's JSON reader takes NaN: the replay then looped forever
        (
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": []}\n'
            '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": []}\n',
            ":2: timestamp is nan",
        ),
        (
            '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1e400]}\n',
            ":1: hash_ids is not a list of integers",
        ),
        (
            f'{{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [{2**70}]}}\n',
            ":1: hash_ids is not a list of integers",
        ),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,3,3\n"
            "2023-11-16T18:15:50Z,3,3\n",
            "TIMESTAMP mixes times with and without a zone",
        ),
        # a count above 2^63 turned negative in the cast: a 58-line traceback, exit 1
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:15:50.0,99999999999999999999,10\n",
            ":2: ContextTokens is '99999999999999999999'",
        ),
    ],
)
def test_bad_trace_is_one_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(content)
    message = one_line_error("--trace", str(path))
    assert str(path) in message and problem in message and "fix:" in message


def test_a_trace_idle_for_more_than_a_day_is_refused_before_simulating(tmp_path: Path) -> None:
    """Two requests a year apart were stepped through 100 ms at a time: killed by `timeout
    60` at 371,005 of 31,622,401 simulated seconds."""
    path = tmp_path / "year.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-01-01 00:00:00,100,10\n2023-01-01 00:00:30,100,10\n2024-01-01 00:00:30,100,10\n"
    )
    assert one_line_error("--trace", str(path)) == (
        f"error: {path}: no request arrives for 365.0 simulated days (from 30 s to 31536030 s "
        "of the trace); the simulator steps through idle time 100 ms at a time and takes at "
        "most a day; fix: remove the gap or split the trace there (--duration 30 keeps what "
        "comes before it)\n"
    )
    # the fix it names works
    kept = simulate(tmp_path, "--trace", str(path), "--duration", "30")
    assert kept["requests"]["total"] == 2


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("faults: [\n", "invalid YAML"),
        ("faults:\n  - {kind: meltdown, start_s: 1}\n", "kind"),
        ("faults:\n  - {kind: jitter, target: l40s, start_s: 9, end_s: 5, factor: 2}\n", ":2:"),
        (
            "faults:\n  - {kind: fail, target: b200-8b, start_s: 1, end_s: 5}\n",
            ":2: faults[0].target",
        ),
        (
            "faults:\n  - kind: new_model\n    start_s: 1\n    model: gpt-5\n"
            "    latency_factor: 2\n",
            ":4: faults[0].model: model 'gpt-5'",
        ),
        # an infinite factor wrote Infinity into the report, a huge one ran out of memory
        (
            "faults:\n  - {kind: jitter, target: l40s, start_s: 1, end_s: 5, factor: .inf}\n",
            "finite",
        ),
        (
            "faults:\n  - {kind: load_spike, start_s: 1, end_s: 5, factor: 1000.0}\n",
            "less than or equal to 100",
        ),
    ],
)
def test_bad_faults_file_is_one_line(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "faults.yaml"
    path.write_text(content)
    message = one_line_error("--trace", str(AZURE_FIXTURE), "--faults", str(path))
    assert str(path) in message and problem in message and "fix:" in message


def test_a_missing_default_trace_names_the_data_dir_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said only "file not found; fix: pass an existing trace file"."""
    monkeypatch.setenv("SLAGUARD_DATA_DIR", str(tmp_path / "data"))
    message = one_line_error()
    assert f"$SLAGUARD_DATA_DIR is '{tmp_path / 'data'}'" in message
    assert "fix: point SLAGUARD_DATA_DIR at the shared data directory" in message


def test_missing_files_and_bad_options_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    assert "file not found" in one_line_error("--trace", str(missing))
    message = one_line_error("--trace", str(AZURE_FIXTURE), "--faults", str(tmp_path / "x.yaml"))
    assert "x.yaml: file not found" in message
    message = one_line_error("--trace", str(AZURE_FIXTURE), "--fleet", str(tmp_path / "f.yaml"))
    assert "f.yaml" in message
    unwritable = tmp_path / "no" / "such" / "dir" / "r.json"
    result = runner.invoke(
        app, ["simulate", "--trace", str(AZURE_FIXTURE), "--report-json", str(unwritable)]
    )
    # refused before the run, not after it (the whole summary printed, then the error)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --report-json: {unwritable.parent} does not exist")


def _small_files() -> None:
    """In the child: any file written past 1,000 bytes fails (EFBIG), as on a full disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))


def test_a_report_that_cannot_be_written_whole_leaves_the_previous_one(tmp_path: Path) -> None:
    """A write that failed part way (a full disk) left the first 1,000 bytes of the new
    report in place of the previous one: neither was readable."""
    report = tmp_path / "report.json"
    report.write_text('{"previous": "report"}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "slaguard", "simulate", "--trace", str(AZURE_FIXTURE),
         "--duration", "5", "--report-json", str(report)],
        capture_output=True, text=True, preexec_fn=_small_files,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"error: --report-json: cannot write {report}: File too large; fix: write somewhere else"
    )
    assert report.read_text() == '{"previous": "report"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_report_to_a_device_or_through_a_link_keeps_them(tmp_path: Path) -> None:
    """Written beside and renamed over, the report must not replace /dev/null with a file
    (as root, it could), nor a symbolic link with one: the device is written to and the
    link's file replaced."""
    (tmp_path / "real.json").write_text("old\n")
    (tmp_path / "link.json").symlink_to("real.json")
    for target in (Path(os.devnull), tmp_path / "link.json"):
        args = ["simulate", "--trace", str(AZURE_FIXTURE), "--duration", "5"]
        result = runner.invoke(app, [*args, "--report-json", str(target)])
        assert result.exit_code == 0, result.output
    assert Path(os.devnull).is_char_device()
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "real.json").read_text())["trace"]["requests"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_real_process_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    """Outside the test runner too: no traceback reaches the terminal."""
    proc = subprocess.run(
        [sys.executable, "-m", "slaguard", "simulate", "--trace", str(tmp_path / "gone.csv")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (
        proc.stderr
        == f"error: {tmp_path / 'gone.csv'}: file not found; fix: pass an existing trace file\n"
    )


def test_a_scenario_that_would_not_act_as_written_is_warned_about(tmp_path: Path) -> None:
    """A typo'd key (`end:`, `fault:`) or a window past the trace ran silently without
    the fault the author meant."""
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "faults:\n  - kind: new_model\n    model: llama3.1-8b\n    start_s: 1\n    end: 9\n"
        "    latency_factor: 2\n  - {kind: load_spike, start_s: 90000, end_s: 90001, factor: 2}\n"
        "  - {kind: fail, target: h100-8b-0, start_s: 90000, end_s: 90001}\n"
        "  - {kind: fail, target: h100-8b-0, start_s: 100, end_s: 101}\n"
    )
    result = runner.invoke(app, ["simulate", "--trace", str(AZURE_FIXTURE), "--faults", str(typo)])
    assert result.exit_code == 0, result.output
    warnings = [x for x in result.stderr.splitlines() if x.startswith("warning: ")]
    assert warnings == [
        f"warning: {typo}:5: faults[0].end: not a field of a new_model fault, ignored (its "
        "fields: start_s, end_s, model, latency_factor)",
        f"warning: {typo}: faults[1] (load_spike) starts at 90000 s, after the trace's last "
        f"arrival at {warnings[1].split('arrival at ')[1].split(' s')[0]} s: it hits nothing",
        f"warning: {typo}: faults[2] (fail) starts at 90000 s, after the trace's last "
        f"arrival at {warnings[1].split('arrival at ')[1].split(' s')[0]} s: it hits nothing",
        # before the drain ends a target-side fault still meets the queued requests
        f"warning: {typo}: faults[3] (fail) starts at 100 s, after the trace's last "
        f"arrival at {warnings[1].split('arrival at ')[1].split(' s')[0]} s: it hits only "
        "requests still in flight then (nothing if the run has drained by then)",
    ]
    nothing = tmp_path / "nothing.yaml"
    nothing.write_text(
        "fault:\n  - {kind: jitter, target: l40s, start_s: 1, end_s: 5, factor: 2}\n"
    )
    # the file means nothing: refused, not run without faults
    assert one_line_error("--trace", str(AZURE_FIXTURE), "--faults", str(nothing)) == (
        f"error: {nothing}:1: fault: unknown key 'fault' and no `faults:`; "
        "fix: did you mean `faults:`? rename it\n"
    )


def test_a_trace_path_is_printed_as_written(tmp_path: Path) -> None:
    """A path is not rich markup (`[/b]` was a MarkupError) nor a terminal escape."""
    trace = tmp_path / "q[" / "b]\x1b[2J.csv"  # the path reads `.../q[/b]...`
    trace.parent.mkdir()
    trace.write_bytes(AZURE_FIXTURE.read_bytes())
    args = ["simulate", "--trace", str(trace), "--policy", "round-robin"]
    result = runner.invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        f"round-robin on {tmp_path}/q[/b]\\x1b[2J.csv: 200 requests (200 completed, "
    )
    assert "\x1b" not in result.stdout


def test_one_of_a_kind_reads_singular_and_a_missing_rate_is_a_bare_dash(tmp_path: Path) -> None:
    """`1 requests`, `1 targets`, and `- %` for a priority with no requests."""
    fleet = tmp_path / "one.yaml"
    fleet.write_text("name: one\ntargets:\n  - {id: solo, model: llama3.1-8b, card: l40s}\n")
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50.0,500,10\n")
    result = runner.invoke(app, ["simulate", "--fleet", str(fleet), "--trace", str(trace)])
    assert result.exit_code == 0, result.output
    assert "1 request (1 completed, 0 rejected, 0 failed)" in " ".join(result.stdout.split())
    lines = result.stdout.splitlines()
    rates = [line.split("│")[2].strip() for line in lines if "priority" in line]
    assert sorted(rates) == ["-", "-", "0.00 %"]
    shown = runner.invoke(app, ["fleet", "show", "--fleet", str(fleet)])
    assert shown.exit_code == 0, shown.output
    assert "one.yaml): 1 target " in " ".join(shown.stdout.split())  # the title wraps
