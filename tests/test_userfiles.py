"""The one-line errors every user-file loader shares (fleet, scenario, service config)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slaguard.fleet.fleet import FleetError, load_fleet
from slaguard.service.config import ServiceConfigError, load_config
from slaguard.sim.faults import FaultError, load_faults
from slaguard.userfiles import USER_FILE_MAX_BYTES, parse_user_yaml, read_user_text


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


@pytest.mark.timeout(20)  # before the fix, opening the FIFO waited for a writer for ever
def test_devices_pipes_and_huge_files_are_refused_unread(tmp_path: Path) -> None:
    fifo = tmp_path / "fleet.yaml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as sparse:  # 16 MB + 1 byte without writing them
        sparse.truncate(USER_FILE_MAX_BYTES + 1)
    pipe = "not a regular file (a device, pipe or socket); fix: pass a {} saved on disk"
    cases = [
        (lambda: load_fleet(fifo), FleetError, f"{fifo}: {pipe.format('fleet file')}"),
        (lambda: load_faults(fifo), FaultError, f"{fifo}: {pipe.format('scenario file')}"),
        (
            lambda: load_config(fifo),
            ServiceConfigError,
            f"{fifo}: {pipe.format('YAML config file')}",
        ),
        (
            lambda: load_fleet(Path("/dev/zero")),
            FleetError,
            f"/dev/zero: {pipe.format('fleet file')}",
        ),
        (
            lambda: load_fleet(huge),
            FleetError,
            f"{huge}: larger than 16 MB; fix: pass the fleet file, which is a few kilobytes "
            "of YAML",
        ),
    ]
    for call, error, message in cases:
        with pytest.raises(error) as info:
            call()
        assert str(info.value) == message


def test_a_file_at_the_size_limit_is_read(tmp_path: Path) -> None:
    """The limit is inclusive: 16 MB exactly is read whole."""
    big = tmp_path / "scenario.yaml"
    big.write_bytes(b"#" * USER_FILE_MAX_BYTES)
    assert len(read_user_text(big, FaultError, "scenario file")) == USER_FILE_MAX_BYTES


def test_only_yaml_1_2_booleans_are_booleans() -> None:
    """`yes`, `no`, `on` and `off` stay text (YAML 1.2), for the strict fields to refuse:
    PyYAML (YAML 1.1) made `enabled: on` true and `id: no` false."""
    text = "a: [yes, No, on, OFF, y, n]\nb: [true, True, TRUE, false, False, FALSE]\n"
    assert parse_user_yaml(text, "x.yaml", ValueError) == {
        "a": ["yes", "No", "on", "OFF", "y", "n"],
        "b": [True, True, True, False, False, False],
    }
