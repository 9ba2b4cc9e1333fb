"""A listen port out of range, or one that needs privileges, is refused in the same words
by `slaguard serve` (its flag, variable and config file) and `slaguard emulate`: one line,
exit 2, nothing started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from slaguard.cli.main import app

SERVE_FIX = "fix: use a port from 1 to 65535, or 0 for any free port"
EMULATE_FIX = "fix: use a port from 1 to 65535"


def _refusal(args: list[str], env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    return result.stderr.removesuffix("\n")


@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_a_port_out_of_range_is_worded_alike_by_both_commands(port: str, tmp_path: Path) -> None:
    """serve said `Input should be less than or equal to 65535 (got 70000); fix: pass a
    valid value`, emulate `70000 is not in the range 1<=x<=65535`."""
    db = str(tmp_path / "audit.db")
    assert _refusal(["serve", "--db", db, f"--port={port}"]) == (
        f"error: --port: {port} is out of range; {SERVE_FIX}"
    )
    assert _refusal(["emulate", "--card", "l40s", f"--port={port}"]) == (
        f"error: --port: {port} is out of range; {EMULATE_FIX}"
    )
    assert not (tmp_path / "audit.db").exists()


def test_emulate_refuses_port_0_saying_why() -> None:
    """serve takes 0 (any free port, which it logs); an emulator's port goes into the
    fleet file, so it must be known."""
    assert _refusal(["emulate", "--card", "l40s", "--port", "0"]) == (
        f"error: --port: 0 is out of range; {EMULATE_FIX}"
    )


def test_the_serve_config_and_variable_word_it_alike(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("port: 70000\n")
    db = str(tmp_path / "audit.db")
    assert _refusal(["serve", "--db", db, "--config", str(config)]) == (
        f"error: {config}: port: 70000 is out of range; {SERVE_FIX}"
    )
    assert _refusal(["serve", "--db", db], env={"SLAGUARD_SERVE_PORT": "-1"}) == (
        f"error: $SLAGUARD_SERVE_PORT: port: -1 is out of range; {SERVE_FIX}"
    )


@pytest.mark.parametrize("command", [["serve"], ["emulate", "--card", "l40s"]])
def test_a_port_that_is_no_number_is_worded_alike(command: list[str]) -> None:
    assert _refusal([*command, "--port", "abc"]) == (
        "error: --port: 'abc': input should be a valid integer, unable to parse string as an "
        f"integer; see 'slaguard {command[0]} --help'"
    )


def _privileged_port() -> int:
    """A port below `net.ipv4.ip_unprivileged_port_start` (1024 unless an admin moved it)."""
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 1:
        pytest.skip(f"no port needs privileges here (ip_unprivileged_port_start={start})")
    return min(start - 1, 1023)


def _without_bind_privilege() -> list[str]:
    """A command prefix without CAP_NET_BIND_SERVICE: root drops it with util-linux's
    setpriv (keeping the rest, so the files stay readable); another user lacks it."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--bounding-set=-net_bind_service", "--inh-caps=-net_bind_service"]


@pytest.mark.parametrize(
    ("command", "env", "source"),
    [
        (["serve", "--db", "{db}"], {"SLAGUARD_SERVE_PORT": "{port}"}, "$SLAGUARD_SERVE_PORT"),
        (["emulate", "--card", "l40s", "--port", "{port}"], {}, "--port"),
    ],
)
def test_a_port_that_needs_privileges_says_so(
    command: list[str], env: dict[str, str], source: str, tmp_path: Path
) -> None:
    """The kernel's EACCES for a port below 1024 without CAP_NET_BIND_SERVICE was worded
    as a wrong address: `fix: use an address of this machine (--host)`. Run for real, not
    mocked: the bind is refused by the kernel, so the port is never taken."""
    port, db = _privileged_port(), tmp_path / "audit.db"
    fill = {"port": str(port), "db": str(db)}
    result = subprocess.run(
        [*_without_bind_privilege(), sys.executable, "-m", "slaguard"]
        + [arg.format(**fill) for arg in command],
        env=os.environ | {k: v.format(**fill) for k, v in env.items()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr == (
        f"error: cannot listen on 127.0.0.1:{port}: Permission denied (port {port} needs "
        f"privileges: root or CAP_NET_BIND_SERVICE); fix: use a port of 1024 or above "
        f"({source})\n"
    )
    assert not db.exists()
