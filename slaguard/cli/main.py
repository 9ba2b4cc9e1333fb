"""The `slaguard` command: one Typer app with a sub-app per domain."""

from __future__ import annotations

import typer

from slaguard.cli import audit, dashboards, db, demo, emulate, fleet, guard, serve, simulate
from slaguard.cli.stdout import run_guarded

app = typer.Typer(
    name="slaguard",
    help="SLA guard for LLM inference on a mixed GPU/NPU fleet.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

app.add_typer(fleet.app, name="fleet")
app.add_typer(db.app, name="db")
app.add_typer(audit.app, name="audit")
app.add_typer(dashboards.app, name="dashboards")
app.command("demo")(demo.demo)
app.command("simulate")(simulate.simulate)
app.command("serve")(serve.serve)
app.command("emulate")(emulate.emulate)
app.command("rollback")(guard.rollback)
app.command("resume")(guard.resume)
app.command("status")(guard.status)
app.command("history")(guard.history)
app.command("incidents")(guard.incidents)


def main() -> None:
    """Console-script entry point; a stdout that cannot be written is one `error:` line."""
    run_guarded(app)
