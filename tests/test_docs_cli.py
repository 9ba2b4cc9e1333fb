"""Every `slaguard` command line the docs and runbooks quote names a real command, and
every option on it is one that command takes: an SRE pastes these mid-incident, and a
renamed flag in a runbook is a usage error at the worst moment. The commands' own
behaviour is tested elsewhere (the runbooks' commands are parsed and run as written in
test_runbook_commands.py); this checks only the words the docs put in front of them."""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import NamedTuple

import pytest

from slaguard.cli.main import COMMANDS, load_command

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "runbooks").glob("*.md")]
)
SHELL = ("sh", "bash", "console", "")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|[\s(=])(?:\S*/)?slaguard\s+(.*)$")
LEADING = re.compile(r"\s*(?:[A-Z_]+=\S*\s+)*(?:\S*/)?slaguard\s")
"""A line that is a command, not text quoting one (`... the URL slaguard connects to`)."""
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")


def _options(command: object) -> set[str]:
    return {
        name
        for param in getattr(command, "params", [])
        if getattr(param, "param_type_name", "") == "option"
        for name in (*param.opts, *param.secondary_opts)
    } | {"--help", "-h"}


@functools.cache
def command_tree() -> dict[tuple[str, ...], set[str]]:
    """Each command path (`("audit", "decisions")`) with the options it takes."""
    tree: dict[tuple[str, ...], set[str]] = {}
    for name, entry in COMMANDS.items():
        command = load_command(name, entry)
        subs = getattr(command, "commands", None)
        tree[(name,)] = _options(command)
        for sub, inner in (subs or {}).items():
            tree[(name, sub)] = _options(inner)
    return tree


class Quoted(NamedTuple):
    """A line a document quotes: where, what, and whether a shell block holds it (else it
    is an inline code span of the prose)."""

    number: int
    text: str
    shell: bool


def quoted_lines(text: str) -> list[Quoted]:
    """The shell lines of code blocks (a trailing `\\` joins the next, comments cut) and
    the inline code spans of the prose, each with its line number."""
    out: list[Quoted] = []
    fence: str | None = None  # the open block's language
    joined, start = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fence = line.lstrip()[3:].strip() if fence is None else None
            continue
        if fence is None:
            out += [Quoted(number, span, False) for span in CODE_SPAN.findall(line)]
            continue
        if fence not in SHELL:
            continue
        if not joined:
            start = number
        joined += re.sub(r"(^|\s)#\s.*$", "", line)
        if joined.endswith("\\"):
            joined = joined[:-1] + " "
            continue
        out.append(Quoted(start, joined, True))
        joined = ""
    return out


def invocations(line: str) -> list[tuple[list[str], bool]]:
    """The words after each `slaguard` in a line, one list per shell command, and whether
    the command starts with it (else it is quoted inside some text)."""
    found: list[tuple[list[str], bool]] = []
    for part in re.split(r"\s*(?:\||;|&&)\s*", line):
        match = COMMAND.search(part)
        if match is None:
            continue
        try:
            words = shlex.split(match.group(1))
        except ValueError:  # an unbalanced quote in an elided example: split on spaces
            words = match.group(1).split()
        found.append((words, LEADING.match(part) is not None))
    return found


def problems(name: str, text: str, tree: dict[tuple[str, ...], set[str]]) -> list[str]:
    """`name:line: slaguard ...: what is wrong` for each quoted command the CLI lacks."""
    wrong: list[str] = []
    for number, line, _ in quoted_lines(text):
        for words, leading in invocations(line):
            if not words or not re.fullmatch(r"[a-z][a-z-]*", words[0]):
                continue  # `slaguard ...`, `slaguard --help`
            where = f"{name}:{number}: slaguard {' '.join(words)}"
            if (words[0],) not in tree:
                if leading:
                    wrong.append(f"{where}: no command {words[0]!r}")
                continue
            subs = {key[1] for key in tree if len(key) == 2 and key[0] == words[0]}
            command: tuple[str, ...] = (words[0],)
            if subs and len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]):
                if words[1] not in subs:
                    wrong.append(f"{where}: {words[0]} has no subcommand {words[1]!r}")
                    continue
                command = (words[0], words[1])
            for word in words[len(command) :]:
                option = OPTION.match(word.lstrip("[(").split("=")[0])
                if option and option.group(1) not in tree[command]:
                    wrong.append(f"{where}: {' '.join(command)} has no option {option.group(1)}")
    return wrong


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_slaguard_command_and_option_exists(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert problems(str(path.relative_to(ROOT)), text, command_tree()) == []


def test_the_check_finds_a_wrong_option_command_or_subcommand() -> None:
    """The guard itself: what the CLI lacks is caught, in code spans and in shell blocks
    (continued lines joined, comments and pipes cut); what it has is not."""
    text = (
        "Run `slaguard status --window 30m --json` or `slaguard rollback --reson x`;\n"
        "`the URL slaguard connects to` is text, `run slaguard db upgade` is not.\n"
        "```sh\n"
        "slaguard audit decisions --since -2h \\\n"
        "    [--target ID] --limt 5   # --not-an-option in a comment\n"
        "slaguard audit explian ID\n"
        "slaguard incidents -f json | jq '.[] | .id'\n"
        ".venv/bin/slaguard statuz\n"
        "```\n"
    )
    assert problems("probe.md", text, command_tree()) == [
        "probe.md:1: slaguard rollback --reson x: rollback has no option --reson",
        "probe.md:2: slaguard db upgade: db has no subcommand 'upgade'",
        "probe.md:4: slaguard audit decisions --since -2h [--target ID] --limt 5: "
        "audit decisions has no option --limt",
        "probe.md:6: slaguard audit explian ID: audit has no subcommand 'explian'",
        "probe.md:8: slaguard statuz: no command 'statuz'",
    ]
