"""Checking PromQL with the real parser: `promtool check rules` on a generated rule file.

Dashboards and runbooks carry PromQL that no Prometheus evaluates until an SRE opens them;
wrapping each expression in a recording rule lets `promtool` reject a typo at test time.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

DEFAULT_VARIABLES: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "datasource": "prometheus",
    "fleet": ".*",
    "job": "slaguard",
    "instance": ".*",
}
"""Values that turn Grafana template variables into plain PromQL."""

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


class PromqlError(ValueError):
    """One or more expressions did not parse; the message names each and promtool's reason."""


def substitute(expr: str, variables: Mapping[str, str] = DEFAULT_VARIABLES) -> str:
    """Replace `$var`, `${var}`, `${var:fmt}` and `[[var]]` with values from `variables`.

    Raises KeyError naming a variable that has no value, so no `$` reaches Prometheus.
    """

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        return variables[name]

    return _VARIABLE.sub(one, expr)


def rule_file_for(exprs: Sequence[str]) -> str:
    """A rule file with one recording rule per expression, in order."""
    rules = [{"record": f"check:expr_{i}:value", "expr": e} for i, e in enumerate(exprs)]
    return yaml.safe_dump({"groups": [{"name": "promql-check", "rules": rules}]}, sort_keys=False)


def _promtool_check(promtool: str, exprs: Sequence[str], workdir: Path) -> str | None:
    path = workdir / "check.yml"
    path.write_text(rule_file_for(exprs), encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


def check_promql(named_exprs: Mapping[str, str], promtool: str = "promtool") -> None:
    """Raise PromqlError unless every expression parses; one promtool run when all do."""
    names, exprs = list(named_exprs), list(named_exprs.values())
    with tempfile.TemporaryDirectory(prefix="slaguard-promql-") as tmp:
        workdir = Path(tmp)
        if _promtool_check(promtool, exprs, workdir) is None:
            return
        failures = []
        for name, expr in zip(names, exprs, strict=True):
            reason = _promtool_check(promtool, [expr], workdir)
            if reason is not None:
                failures.append(f"{name}: {expr!r}: {reason.splitlines()[-1]}")
    raise PromqlError("; ".join(failures) or "promtool rejected the rule file")


_SLAGUARD_SERIES = re.compile(r"\bslaguard_[a-z0-9_]+")
_RECORDED_SERIES = re.compile(r"\b[a-z_]+:slaguard_[a-z0-9_]+:[a-z0-9_]+")


def referenced_series(expr: str) -> tuple[set[str], set[str]]:
    """(slaguard series names, recording-rule names) an expression reads."""
    recorded = set(_RECORDED_SERIES.findall(expr))
    plain = _RECORDED_SERIES.sub(" ", expr)
    return set(_SLAGUARD_SERIES.findall(plain)), recorded
