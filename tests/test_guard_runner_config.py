"""`python -m slaguard.guard.runner --config FILE` reads the guard section as `serve` does:
one error line naming the file, field, value and fix, exit 2, before touching anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slaguard.guard.runner import main


def _start_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    config = tmp_path / "guard.yaml"
    config.write_text(text)
    code = main(["--db", f"sqlite:///{tmp_path / 'audit.db'}", "--config", str(config)])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 2 and [(e["event"], e["where"]) for e in lines] == [("error", "start")]
    assert str(config) in lines[0]["detail"]
    return str(lines[0]["detail"]).replace(str(config), "FILE")


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            "breaker:\n  auto_return: yes\n",
            "FILE: breaker.auto_return: Input should be a valid boolean (got 'yes'); fix: "
            "write true or false, without quotes",
        ),
        (
            "min_samples: 5\nmin_samples: 6\n",
            "FILE: line 2: duplicate key 'min_samples' (first on line 1); fix: keep one "
            "(the second would replace the first)",
        ),
        ("[1, 2\n", "FILE: line 2: invalid YAML; fix: correct the syntax"),
    ],
)
def test_a_bad_guard_config_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, detail: str
) -> None:
    assert _start_error(tmp_path, capsys, text) == detail


def test_a_missing_guard_config_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    code = main(["--db", f"sqlite:///{tmp_path / 'a.db'}", "--config", str(missing)])
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert code == 2
    assert line["detail"] == f"{missing}: file not found; fix: pass an existing guard config file"
