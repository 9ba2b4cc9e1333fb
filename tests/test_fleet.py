"""Fleet files and catalogues: derived numbers and one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from slaguard.cli.main import app
from slaguard.fleet import FleetError, build_fleet, load_fleet
from slaguard.fleet.fleet import MEMORY_HEADROOM

ROOT = Path(__file__).resolve().parents[1]


def test_default_fleet_is_mixed_and_large_enough() -> None:
    fleet = load_fleet()
    assert len(fleet) == 19
    assert {"h100", "h200", "l40s", "ascend910b"} <= set(fleet.card_types())
    assert len({t.model.id for t in fleet}) >= 2


def test_example_fleet_file_is_the_builtin_default() -> None:
    packaged = (ROOT / "slaguard" / "data" / "fleet.yaml").read_text()
    assert (ROOT / "examples" / "fleet.yaml").read_text() == packaged
    # and users' files are read stricter (YAML 1.2 booleans, duplicate keys refused)
    example = load_fleet(ROOT / "examples" / "fleet.yaml")
    assert example.digest == load_fleet().digest


def test_kv_bytes_per_token_follow_gqa() -> None:
    models = load_fleet().models
    # 2 (K,V) x 80 layers x 8 KV heads x 128 head dim x 2 bytes; 64 query heads would be 8x
    assert models["llama3.1-70b"].kv_bytes_per_token == 327_680
    assert models["llama3.1-8b"].kv_bytes_per_token == 131_072
    # the design document: 70B at 8K context ~ a few GB of KV per request
    assert 2.5 < models["llama3.1-70b"].kv_bytes_per_token * 8192 / 1e9 < 6


def test_kv_budget_is_memory_under_headroom_minus_static() -> None:
    t = load_fleet().target("h100-8b-0")
    assert t.kv_budget_gb == pytest.approx(MEMORY_HEADROOM * 80 - 8.03 * 2 - 2.0)


def test_spec_sheet_figures_reach_the_catalogue() -> None:
    cards = load_fleet().cards
    assert (cards["h200"].memory_gb, cards["h200"].memory_bandwidth_gbps) == (141, 4800)
    assert cards["l40s"].interconnect_gbps == 64
    assert cards["h100"].bf16_tflops == 989


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h900"}]},
            "targets[0].card: unknown card type 'h900'",
        ),
        (
            {"targets": [{"id": "a", "model": "gpt-9", "card": "h100"}]},
            "targets[0].model: unknown model 'gpt-9'",
        ),
        ({"targets": [{"id": "a", "model": "llama3.1-70b", "card": "h100"}]}, "fix: set tp >= 2"),
        (
            {
                "targets": [
                    {"id": "a", "model": "llama3.1-8b", "card": "h100"},
                    {"id": "a", "model": "llama3.1-8b", "card": "h100"},
                ]
            },
            "targets[1].id: duplicate target id 'a'",
        ),
        (
            {
                "cards": {
                    "x": {
                        "name": "X",
                        "generation": "g",
                        "memory_gb": -1,
                        "memory_bandwidth_gbps": 1,
                        "bf16_tflops": 1,
                        "interconnect": "pcie",
                        "interconnect_gbps": 1,
                        "failure_rate_per_hour": 0,
                    }
                },
                "targets": [{"id": "a", "model": "llama3.1-8b", "card": "x"}],
            },
            "cards.x.memory_gb",
        ),
        (
            {"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100", "tp": 0}]},
            "targets[0].tp",
        ),
        (
            {"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100", "url": "not a url"}]},
            "targets[0].url: Input should be a valid URL",
        ),
        (  # accepted before: the simulator then rejected every request
            {"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100", "priorities": []}]},
            "targets[0].priorities: List should have at least 1 item",
        ),
        (  # all 0 passed `fleet show` and failed in `simulate`; 2.7 was silently rescaled
            {
                "sla": {p: {"ttft_s": 1, "share": 0.9} for p in ("high", "normal", "low")},
                "targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100"}],
            },
            "sla: the shares sum to 2.7, not 1",
        ),
        (
            {"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h100", "url": "ftp://x"}]},
            "URL scheme should be 'http' or 'https' (got 'ftp://x'); fix: write the backend's",
        ),
    ],
)
def test_mistakes_name_file_field_and_fix(doc: dict[str, object], expected: str) -> None:
    with pytest.raises(FleetError) as err:
        build_fleet(doc, "fleet.yaml")
    msg = str(err.value)
    assert msg.startswith("fleet.yaml: ")
    assert expected in msg
    assert "fix:" in msg
    assert "\n" not in msg


def test_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text(
        yaml.safe_dump({"targets": [{"id": "a", "model": "llama3.1-8b", "card": "h900"}]})
    )
    proc = subprocess.run(
        [sys.executable, "-m", "slaguard", "fleet", "show", "--fleet", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "targets[0].card" in lines[0] and str(bad) in lines[0]


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(FleetError, match="file not found"):
        load_fleet(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("targets: [\n  - {id: a\n")
    with pytest.raises(FleetError, match=r"line \d+: invalid YAML"):
        load_fleet(broken)
    twice = tmp_path / "twice.yaml"  # plain YAML keeps the second `targets:`, silently
    twice.write_text(
        "targets:\n  - {id: a, model: llama3.1-8b, card: l40s}\n"
        "targets:\n  - {id: b, model: llama3.1-8b, card: h100}\n"
    )
    with pytest.raises(
        FleetError, match=r"twice.yaml: line 3: duplicate key 'targets' \(first on line 1\); fix:"
    ):
        load_fleet(twice)
    listed = tmp_path / "listed.yaml"  # an unhashable key raised a bare TypeError
    listed.write_text("? [a, b]\n: 1\n")
    with pytest.raises(FleetError, match=r"listed.yaml: line \d+: invalid YAML"):
        load_fleet(listed)


def test_a_yaml_merge_key_shares_a_target_template(tmp_path: Path) -> None:
    """`<<: *base` was "invalid YAML": the duplicate-key check met the merge key first."""
    path = tmp_path / "merged.yaml"
    path.write_text(
        "targets:\n"
        "  - &base {id: a, model: llama3.1-8b, card: h100, priorities: [high, normal]}\n"
        "  - <<: *base\n    id: b\n    card: l40s\n"
    )
    fleet = load_fleet(path)
    assert [(t.id, t.card.id, sorted(p.value for p in t.priorities)) for t in fleet] == [
        ("a", "h100", ["high", "normal"]),
        ("b", "l40s", ["high", "normal"]),
    ]
    path.write_text("targets:\n  - <<: {card: h100}\n    id: a\n    id: b\n")
    with pytest.raises(FleetError, match=r"line 4: duplicate key 'id' \(first on line 3\)"):
        load_fleet(path)


def test_count_expands_ids_and_url_template() -> None:
    fleet = build_fleet(
        {
            "targets": [
                {
                    "id": "l",
                    "model": "llama3.1-8b",
                    "card": "l40s",
                    "count": 3,
                    "url": "http://127.0.0.1:90{i}0",
                }
            ]
        }
    )
    assert [t.id for t in fleet] == ["l-0", "l-1", "l-2"]
    assert fleet.target("l-2").url == "http://127.0.0.1:9020"


def test_fleet_show_prints_names_as_written_and_whole_when_piped(tmp_path: Path) -> None:
    """A name was read as Rich markup (`prod[/]` crashed, `prod [eu]` lost its tag) and
    ids were cut to 80 columns with an ellipsis, so `fleet show | grep ID` found nothing."""
    path = tmp_path / "fleet.yaml"
    long_id = "l40s-8b-a-rather-long-target-name-for-grep-7"
    path.write_text(
        f'name: "prod[/] [eu-west]"\ntargets:\n  - {{id: {long_id}, model: llama3.1-8b, '
        "card: l40s}\n"
    )
    shown = CliRunner().invoke(app, ["fleet", "show", "--fleet", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "prod[/] [eu-west]" in shown.stdout and long_id in shown.stdout


def test_a_model_some_priorities_can_never_reach_is_warned_about(tmp_path: Path) -> None:
    """Served only at `low` and degrading nowhere, qwen's high and normal requests were all
    refused (rejected in a simulation) with no word at load time."""
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "targets:\n"
        "  - {id: h200-qwen, model: qwen2.5-32b, card: h200, count: 2, priorities: [low]}\n"
        "  - {id: l40s-8b, model: llama3.1-8b, card: l40s, count: 4}\n"
    )
    fleet = load_fleet(path)
    assert fleet.notes == (
        f"{path}: qwen2.5-32b is served only at low: requests at high, normal are refused; "
        "fix: add a target serving them, or a degrade_to for qwen2.5-32b",
    )
    shown = CliRunner().invoke(app, ["fleet", "show", "--fleet", str(path)])
    assert shown.exit_code == 0
    assert shown.stderr.count("warning: ") == 1 and "qwen2.5-32b is served only at low" in (
        shown.stderr
    )
    path.write_text(
        path.read_text() + "  - {id: a100-qwen, model: qwen2.5-32b, card: a100, tp: 2,"
        " priorities: [high, normal]}\n"
    )
    assert load_fleet(path).notes == ()


@pytest.mark.parametrize(
    "url",
    ["http://bob:s3cret-pw@10.0.0.5:8000", "https://bob@10.0.0.5", "http://:s3cret-pw@10.0.0.{i}"],
)
def test_url_with_credentials_is_refused_without_echoing_them(url: str) -> None:
    """`/v1/route` answers each client its target's url and `/v1/status` shows every one,
    both without credentials: a password in a url reached every caller (and the scraper's
    failure log), so it is refused, and the refusal does not quote it."""
    target = {"id": "a", "model": "llama3.1-8b", "card": "h100", "url": url, "count": 2}
    with pytest.raises(FleetError) as err:
        build_fleet({"targets": [target]}, "fleet.yaml")
    msg = str(err.value)
    assert msg.startswith("fleet.yaml: targets[0].url: ")
    assert "user name or password" in msg
    assert "SLAGUARD_BACKEND_API_KEY" in msg
    assert "s3cret" not in msg and "bob" not in msg
    assert "\n" not in msg
