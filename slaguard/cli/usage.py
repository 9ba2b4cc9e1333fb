"""Click's usage errors (a value out of range, an unknown choice or option, a missing
argument) as one `error:` line, exit 2, like every other user mistake.

Typer drew them as a usage line, a hint and a boxed message: three to six lines, in a
form no other refusal of the command line takes. Each ends pointing at its command's help.
An option's value that is the next flag (`rollback --reason --hold`) is one of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePath
from typing import Any, NoReturn

from typer._click.core import Command, Context, ParameterSource
from typer._click.exceptions import (
    BadParameter,
    MissingParameter,
    NoArgsIsHelpError,
    NoSuchOption,
    UsageError,
)
from typer._click.globals import get_current_context
from typer._display import describe_number_range
from typer.core import TyperOption

from slaguard.cli.errors import fail

_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
"""Pydantic's error types for a number outside an option's `min`/`max`."""


def _what(param: Any) -> str:
    """How the command line names a parameter: `--rate-scale`, `argument incident_id`."""
    if param.param_type_name == "argument":
        return f"argument {param.name}"
    return str(param.opts[0])


def _reason(exc: BadParameter, param: Any) -> str:
    """What is wrong with the value, with the value: Typer's message names neither the
    value nor, for a number, the whole range."""
    cause: Any = exc.__cause__  # Typer's coercion raised it from pydantic's ValidationError
    errors = cause.errors() if hasattr(cause, "errors") else []
    if errors:
        given = errors[0].get("input")
        if errors[0].get("type") in _RANGE_ERRORS:
            span = describe_number_range(param.min, param.max)  # as --help shows it
            return f"{given} is not in the range {span}"
        if errors[0].get("type") != "value_error":
            return f"{given!r}: {_lower(exc.message)}"
    return _lower(exc.message.removeprefix("Value error, "))


def _lower(message: str) -> str:
    return (message[:1].lower() + message[1:]).rstrip(".")


def usage_line(exc: UsageError) -> str:
    """`exc` as the text of one `error:` line, pointing at the command's help."""
    if isinstance(exc, BadParameter) and not isinstance(exc, MissingParameter) and exc.param:
        text = f"{_what(exc.param)}: {_reason(exc, exc.param)}"
    else:
        text = _lower(exc.format_message())
    text = text.replace(". Did you mean", "; did you mean")  # a command's near names
    if isinstance(exc, NoSuchOption) and exc.possibilities:
        text = f"{exc.message}; did you mean {' or '.join(sorted(exc.possibilities))}?"
        text = _lower(text)
    if exc.ctx is not None:
        text += " See" if text.endswith("?") else "; see"
        text += f" '{exc.ctx.command_path} --help'"
    return text


def refuse_options_as_values(ctx: Context) -> None:
    """A value given on the command line that starts with `--` is the next flag, taken
    as the value: `rollback --reason --hold` rolled back without the hold, `audit decisions
    --target --db x.db` filtered on a target `--db` in the default database. A relative
    time has one dash (`--since -2h`); text of several words is a value whatever its start
    (`--reason "--force was needed"`)."""
    for param in ctx.command.params:
        if not isinstance(param, TyperOption) or param.is_flag or param.name is None:
            continue
        if ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
            continue
        value = ctx.params.get(param.name)
        for item in value if isinstance(value, list | tuple) else [value]:
            words = str(item).split() if isinstance(item, str | PurePath) else []
            if len(words) == 1 and words[0].startswith("--"):
                raise BadParameter(
                    f"{words[0]!r} looks like an option, not a value; fix: give the value "
                    f"right after {param.opts[0]}",
                    ctx=ctx,
                    param=param,
                )


class UsageContext(Context):
    """A context that names its command in the usage errors raised while it parses (the
    parser raises "option '--since' requires an argument" without one, and that line
    alone did not say where help is), and refuses an option taken as a value."""

    @contextmanager
    def scope(self, cleanup: bool = True) -> Iterator[Context]:
        """Click parses a command's line in this scope (`Command.make_context`)."""
        try:
            with super().scope(cleanup=cleanup) as ctx:
                yield ctx
        except UsageError as exc:
            # `--target --db x.db` also left `x.db` as an extra argument: the cause first
            refuse_options_as_values(self)
            if exc.ctx is None:
                exc.ctx, exc.cmd = self, self.command
            raise
        if not self.resilient_parsing:
            refuse_options_as_values(self)


def use_usage_context(command: Command) -> None:
    """`command` and every command under it parse in a `UsageContext`."""
    command.context_class = UsageContext
    for sub in getattr(command, "commands", {}).values():
        use_usage_context(sub)


def fail_usage(exc: UsageError) -> NoReturn:
    """One line, exit 2; `slaguard audit` with no subcommand still prints its help."""
    if isinstance(exc, NoArgsIsHelpError):
        raise exc
    fail(usage_line(exc))


def defaulted(name: str) -> bool:
    """Whether option `name` of the running command took its default (was not given)."""
    ctx = get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) is ParameterSource.DEFAULT
