"""The `slaguard` command: one Typer app with a sub-app per domain.

A command's module is imported only when that command runs: the modules behind `serve`,
`simulate` and `audit` pull in FastAPI, the simulator and pandas, and `slaguard rollback`
in an incident should not wait seconds for them. The top-level help lists the commands from
the table below without importing any (a test keeps each summary equal to its command's).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperGroup

from slaguard.cli.stdout import run_guarded
from slaguard.cli.usage import UsageContext, fail_usage, use_usage_context


@dataclass(frozen=True)
class CommandEntry:
    """Where a top-level command lives: a Typer sub-app or a command function."""

    module: str
    attr: str
    summary: str


COMMANDS: dict[str, CommandEntry] = {
    "demo": CommandEntry(
        "slaguard.cli.demo",
        "demo",
        "Run the full demo (or, with --routing-only, explain sample routing decisions).",
    ),
    "simulate": CommandEntry(
        "slaguard.cli.simulate",
        "simulate",
        "Replay a trace through the scheduler on the simulated fleet and report SLA figures.",
    ),
    "serve": CommandEntry(
        "slaguard.cli.serve", "serve", "Serve the routing API and the OpenAI-compatible gateway."
    ),
    "emulate": CommandEntry(
        "slaguard.cli.emulate",
        "emulate",
        "Serve an OpenAI-compatible emulated replica with vLLM-style /metrics.",
    ),
    "rollback": CommandEntry(
        "slaguard.cli.mode",
        "rollback",
        "Send the whole fleet to round-robin now (`--hold`: and keep it there).",
    ),
    "resume": CommandEntry(
        "slaguard.cli.mode",
        "resume",
        "Re-enter the gray rollout (also leaves a hold); resolves the open incident.",
    ),
    "status": CommandEntry(
        "slaguard.cli.status",
        "status",
        "Fleet mode (since when, why, who), leader, open incidents, per-arm SLA figures.",
    ),
    "history": CommandEntry(
        "slaguard.cli.guard",
        "history",
        "Mode switches in a time range: when, from, to, kind, who, why, incident.",
    ),
    "incidents": CommandEntry(
        "slaguard.cli.guard",
        "incidents",
        "Incidents, newest first: detector, subject, state, notification delivery.",
    ),
    "fleet": CommandEntry("slaguard.cli.fleet", "app", "Inspect and validate fleet files."),
    "db": CommandEntry(
        "slaguard.cli.db", "app", "Audit database schema: create, upgrade, inspect."
    ),
    "audit": CommandEntry(
        "slaguard.cli.audit", "app", "Postmortem queries over recorded routing decisions."
    ),
    "dashboards": CommandEntry("slaguard.cli.dashboards", "app", "Grafana dashboards as code."),
}


def load_command(name: str, entry: CommandEntry) -> Any:
    """The command `name` as the click command Typer builds for it (imports its module)."""
    target = getattr(importlib.import_module(entry.module), entry.attr)
    if isinstance(target, typer.Typer):
        command: Any = typer.main.get_group(target)
    else:
        wrapper = typer.Typer(add_completion=False)
        wrapper.command(name)(target)
        command = typer.main.get_command(wrapper)
    command.name = name
    use_usage_context(command)
    return command


class LazyCommands(TyperGroup):
    """A group whose commands are imported on first use; help lists them from `COMMANDS`."""

    context_class = UsageContext

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Stand-ins carrying each summary: what help lists and typo suggestions search.
        self.commands = {
            name: TyperCommand(name=name, help=entry.summary) for name, entry in COMMANDS.items()
        }
        self._loaded: dict[str, Any] = {}
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return self.commands[cmd_name]
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load_command(cmd_name, entry)
        return self._loaded[cmd_name]

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as exc:
            fail_usage(exc)

    def invoke(self, ctx: Any) -> Any:
        """Runs the command; a usage error in its command line is one `error:` line."""
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            fail_usage(exc)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="slaguard",
    cls=LazyCommands,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
)


@app.callback()
def root() -> None:
    """SLA guard for LLM inference on a mixed GPU/NPU fleet."""


def main() -> None:
    """Console-script entry point; a stdout that cannot be written is one `error:` line."""
    run_guarded(app)


if __name__ == "__main__":  # `python -m slaguard.cli.main`, like `python -m slaguard`
    main()
