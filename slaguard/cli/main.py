"""The `slaguard` command: one Typer app with a sub-app per domain."""

from __future__ import annotations

import typer

from slaguard.cli import demo, fleet

app = typer.Typer(
    name="slaguard",
    help="SLA guard for LLM inference on a mixed GPU/NPU fleet.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(fleet.app, name="fleet")
app.command("demo")(demo.demo)


def main() -> None:
    """Console-script entry point."""
    app()
