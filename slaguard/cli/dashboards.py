"""`slaguard dashboards`: build the Grafana dashboards, check them, list their PromQL."""

from __future__ import annotations

from pathlib import Path

import typer

from slaguard.cli.errors import fail
from slaguard.cli.paths import path_option
from slaguard.dashboards import VARIABLES, panel_queries, render_all, write_all

app = typer.Typer(help="Grafana dashboards as code.", no_args_is_help=True)


@app.command()
def build(
    out: Path = path_option(Path("dashboards"), "--out", help="Directory for the JSON files."),
    check: bool = typer.Option(
        False,
        "--check",
        help="Write nothing; exit 1 if a file in --out differs from a build or is missing.",
    ),
) -> None:
    """Write every dashboard as `<uid>.json` into --out.

    The committed copies live in `dashboards/`."""
    if out.exists() and not out.is_dir():
        fail(f"--out: {out} is a file; fix: pass a directory such as dashboards/")
    if not check:
        try:
            written = write_all(out)
        except OSError as exc:
            fail(
                f"--out: cannot write {exc.filename or out}: {exc.strerror or exc}; fix: pass "
                "a directory you can write"
            )
        for path in written:
            typer.echo(f"wrote {path}")
        return
    if not out.is_dir():  # run outside the checkout: every dashboard was called stale
        fail(
            f"--out: {out} is not a directory in {Path.cwd()}; fix: run from the checkout, "
            "whose dashboards/ holds the committed copies, or pass --out DIR"
        )
    differ = 0
    for name, text in render_all().items():
        path = out / name
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        differ += 1
        what = "stale" if path.exists() else "missing"
        typer.echo(f"{what}: {path} (run: slaguard dashboards build --out {out})")
    raise typer.Exit(1 if differ else 0)


@app.command()
def queries(
    var: list[str] = typer.Option(
        [], "--var", help="Template variable value, NAME=VALUE (repeatable)."
    ),
) -> None:
    """Print every panel's PromQL as `uid<TAB>panel<TAB>expr`, variables substituted."""
    values: dict[str, str] = {}
    for item in var:
        name, sep, value = item.partition("=")
        if not sep or name not in VARIABLES:
            fail(
                f"--var: {item!r} is not NAME=VALUE; fix: give NAME=VALUE with NAME one of "
                f"{sorted(VARIABLES)}"
            )
        bad = next((ch for ch in value if ch in '"\\`\n'), None)
        if bad is not None:
            fail(
                f"--var: {item!r} has {bad!r} in its value, which would end the PromQL string "
                "it goes into; fix: give a label value without quotes, backslashes or newlines"
            )
        values[name] = value
    for q in panel_queries(values, annotations=True):
        typer.echo(f"{q.dashboard_uid}\t{q.panel_title}\t{q.expr}")
