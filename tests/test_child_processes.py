"""The guard every module runs under: a child process left running after the module's
teardown fails it, naming the pid and the command line. An `AuditWriter` a module never
closed kept its writer process for the rest of the pytest-xdist worker, where a later
module's process-counting test found it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from child_processes import running
from helpers import wait_for

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")

INNER = """
import subprocess
from pathlib import Path

from child_processes import no_child_left_running  # the guard conftest.py installs


def test_starts_a_child():
    child = subprocess.Popen(["sleep", "{seconds}"])
    Path("pid").write_text(str(child.pid))
"""


def test_a_module_that_leaves_a_child_running_fails_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaks=INNER.format(seconds=60))
    result = pytester.runpytest_inprocess()
    pid = int((pytester.path / "pid").read_text())
    try:
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(
            [
                "*ERROR at teardown of test_starts_a_child*",
                f"*1 child process(es) still running 5s after this module's teardown: pid {pid} "
                "(sleep 60); fix: stop them in a fixture's teardown or a `with` block "
                "(AuditWriter, Service, Popen)*",
            ]
        )
    finally:
        os.kill(pid, signal.SIGKILL)
        wait_for(f"the leaked sleep {pid} to end", lambda: not running(pid))


def test_a_child_that_exits_within_the_grace_passes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_exits=INNER.format(seconds=0.5))
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1)
    assert not running(int((pytester.path / "pid").read_text()))
