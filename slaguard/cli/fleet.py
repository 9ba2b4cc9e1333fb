"""`slaguard fleet show`: load and validate a fleet file, print its targets."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from slaguard.cli.errors import fail
from slaguard.cli.paths import path_option
from slaguard.fleet import Fleet, FleetError, load_fleet
from slaguard.plaintext import inert, visible

app = typer.Typer(help="Inspect and validate fleet files.", no_args_is_help=True)

FleetOption = path_option(None, "--fleet", help="Fleet YAML file (default: built-in fleet).")


def load_or_fail(path: Path | None) -> Fleet:
    """Load a fleet for a command; a mistake becomes one line and exit 2."""
    try:
        return load_fleet(path)
    except FleetError as exc:
        fail(str(exc))


@app.command("show")
def show(fleet_file: Path | None = FleetOption) -> None:
    """Validate a fleet file and print every routing target with its KV budget."""
    fleet = load_or_fail(fleet_file)
    for note in fleet.notes:
        typer.echo(f"warning: {visible(note)}", err=True)
    targets = "1 target" if len(fleet) == 1 else f"{len(fleet)} targets"
    table = Table(title=inert(f"{fleet.name} ({fleet.source}): {targets}"))
    for col in ("target", "model", "card", "tp", "V_h GB", "static GB", "V_kv GB", "priorities"):
        table.add_column(col, justify="right" if "GB" in col or col == "tp" else "left")
    for t in fleet:
        table.add_row(  # ids come from the file: shown as written, never parsed as markup
            inert(t.id),
            inert(t.model.id),
            inert(t.card.id),
            str(t.tp),
            f"{t.memory_gb:.0f}",
            f"{t.static_gb:.1f}",
            f"{t.kv_budget_gb:.1f}",
            ",".join(sorted(p.value for p in t.priorities)),
        )
    console = Console()
    if not console.is_terminal:  # piped: whole ids for grep, not a terminal's ellipses
        console = Console(width=1_000)
    console.print(table)
