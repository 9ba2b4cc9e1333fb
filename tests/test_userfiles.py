"""The one-line errors every user-file loader shares (fleet, scenario, service config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slaguard.fleet.fleet import FleetError, load_fleet
from slaguard.service.config import ServiceConfigError, load_config
from slaguard.sim.faults import FaultError, load_faults


def test_missing_directory_and_binary_files_name_the_file_and_fix(tmp_path: Path) -> None:
    binary = tmp_path / "fleet.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n")
    cases = [
        (lambda: load_fleet(tmp_path / "absent.yaml"), FleetError, "file not found"),
        (lambda: load_fleet(tmp_path), FleetError, "is a directory"),
        (lambda: load_fleet(binary), FleetError, "not UTF-8 text"),
        (lambda: load_faults(tmp_path / "absent.yaml"), FaultError, "file not found"),
        (lambda: load_config(tmp_path / "absent.yaml"), ServiceConfigError, "file not found"),
    ]
    for call, error, problem in cases:
        with pytest.raises(error) as info:
            call()
        message = str(info.value)
        assert problem in message and "; fix: " in message and "\n" not in message


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "serve.yaml"
    bad.write_text("port: 8080\nfleet: [unclosed\n", encoding="utf-8")
    with pytest.raises(ServiceConfigError, match=r"serve\.yaml: line 3: invalid YAML"):
        load_config(bad)
    with pytest.raises(FleetError, match=r"serve\.yaml: line 3: invalid YAML"):
        load_fleet(bad)
