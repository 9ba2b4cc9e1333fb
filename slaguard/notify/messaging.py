"""Block Kit messages for incident events, within Slack's limits.

Limits: header text <= 150 chars, section text <= 3,000, <= 10 fields per section, <= 50
blocks; a plain `text` fallback is always set (notifications and screen readers use it).

Subjects, summaries and evidence carry text clients chose (a hot-spot prefix id becomes
the subject). Slack parses `<...>` in mrkdwn and in the `text` fallback: `<!channel>`
pinged the channel, `<http://evil|click>` drew a link, a backtick ended a code span. So
every piece of data goes through `_mrkdwn` (Slack's `&`, `<`, `>` escapes, control
characters written out) or `_code` (the same, its backticks made inert), and mrkdwn
objects are `verbatim` (no auto-linked `#channel` or `@here`). The header is
`plain_text`, which Slack shows as written: there only control characters are written out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

from slaguard.audit.engine import (
    DB_ENV_VAR,
    DEFAULT_SQLITE_FILE,
    has_password,
    without_password,
)
from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.plaintext import visible
from slaguard.scheduler.rollout import HELD_ROUND_ROBIN

HEADER_MAX = 150
SECTION_TEXT_MAX = 3000
FIELD_TEXT_MAX = 2000
FIELDS_MAX = 10
BLOCKS_MAX = 50
_VERDICT_SECTIONS_MAX = 5
_ICON = {
    IncidentState.OPENED: ":red_circle:",
    IncidentState.UPDATED: ":large_yellow_circle:",
    IncidentState.RESOLVED: ":large_green_circle:",
}

Block = dict[str, Any]


@dataclass(frozen=True, slots=True)
class MessageLinks:
    """Where the message points people."""

    dashboard_url: str = "http://localhost:3000/d/slaguard-guard"
    runbook_url: str = "docs/guard.md#runbook"
    guard_db_url: str | None = None
    """The database the guard uses, for the resume command's `--db`; None when not known
    here: the message then says to give it (an on-call copying the command without it
    resumed the default ./slaguard.db)."""


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """`text` fallback plus Block Kit blocks."""

    text: str
    blocks: list[Block]


_BACKTICK_LOOKALIKE = "\u02cb"
"""MODIFIER LETTER GRAVE ACCENT: reads like a backtick, never ends a code span."""


def _mrkdwn(value: object) -> str:
    """Data as mrkdwn text: shown as written, never a mention, link or second line."""
    text = visible(str(value))
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def from_mrkdwn(text: str) -> str:
    """A Slack text as the channel shows it (its three escapes undone): for the terminal."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _code(value: object) -> str:
    """Data as an inline code span (mrkdwn has no backtick escape: a look-alike stands in)."""
    return f"`{_mrkdwn(value).replace('`', _BACKTICK_LOOKALIKE)}`"


def _clip(text: str, limit: int) -> str:
    """At most `limit` characters; a cut never leaves half an `&amp;`-style escape."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _mrkdwn_object(text: str, limit: int) -> Block:
    return {"type": "mrkdwn", "text": _clip(text, limit), "verbatim": True}


def _field(label: str, shown: str) -> Block:
    """`shown` is mrkdwn already (`_mrkdwn` / `_code`); `label` is escaped here."""
    return _mrkdwn_object(f"*{_mrkdwn(label)}*\n{shown}", FIELD_TEXT_MAX)


def _section(text: str) -> Block:
    return {"type": "section", "text": _mrkdwn_object(text, SECTION_TEXT_MAX)}


_GIVE_THE_DB = (
    f" (on the guard's database: add `--db URL`, or set `{DB_ENV_VAR}`; without either it "
    f"acts on ./{DEFAULT_SQLITE_FILE})"
)


def resume_command(event: IncidentEvent, guard_db_url: str | None = None) -> str:
    """The exact CLI line that puts the fleet back on the gray rollout, on `guard_db_url`
    without its password (a masked `***` in a pasted URL is a wrong password; libpq takes
    the real one from `PGPASSWORD` or `~/.pgpass`)."""
    reason = f"incident {event.incident_id} reviewed"
    command = f"slaguard resume --stage {event.resume_stage_pct} --reason {shlex.quote(reason)}"
    if guard_db_url is not None:
        url = without_password(make_url(guard_db_url))
        command += f" --db {shlex.quote(url.render_as_string(hide_password=False))}"
    return command


_PASSWORD_FROM = " (the database password from `PGPASSWORD` or `~/.pgpass`)"


def _resume_text(event: IncidentEvent, guard_db_url: str | None) -> str:
    where = _GIVE_THE_DB if guard_db_url is None else ""
    if guard_db_url is not None and has_password(make_url(guard_db_url)):
        where = _PASSWORD_FROM
    command = _code(resume_command(event, guard_db_url))
    if event.mode_after == HELD_ROUND_ROBIN.label:
        return f"Nothing automatic leaves the hold. To resume once it is safe{where}:\n{command}"
    return f"To resume the learned policy once it is safe{where}:\n{command}"


def _numbers(evidence: dict[str, Any]) -> list[tuple[str, object]]:
    """Scalar evidence entries (numbers first), nested one level with dotted keys."""
    flat: list[tuple[str, object]] = []
    for key, value in evidence.items():
        if isinstance(value, dict):
            flat += [
                (f"{key}.{k}", v)
                for k, v in value.items()
                if isinstance(v, int | float | str | None)
            ]
        elif isinstance(value, int | float | str | None):
            flat.append((key, value))
    flat.sort(key=lambda kv: not isinstance(kv[1], int | float))
    return flat


def _evidence_blocks(event: IncidentEvent) -> list[Block]:
    blocks: list[Block] = []
    for verdict in list(event.evidence.get("verdicts", []))[:_VERDICT_SECTIONS_MAX]:
        blocks.append(
            _section(
                f"*{_mrkdwn(verdict['detector'])}* on {_code(verdict['subject'])}: "
                f"{_mrkdwn(verdict['summary'])}"
            )
        )
        numbers = _numbers(verdict.get("evidence", {}))[:FIELDS_MAX]
        if numbers:
            fields = [_field(k, _mrkdwn(v)) for k, v in numbers]
            blocks.append({"type": "section", "fields": fields})
    return blocks


def _link_blocks(links: MessageLinks) -> list[Block]:
    """Buttons for web links (Slack rejects other URLs in buttons), plain text otherwise."""
    pairs = (("Dashboard", links.dashboard_url), ("Runbook", links.runbook_url))
    web = ("http://", "https://")
    buttons = [
        {"type": "button", "text": {"type": "plain_text", "text": label}, "url": url}
        for label, url in pairs
        if url.startswith(web)
    ]
    others = [f"{label}: {_code(url)}" for label, url in pairs if not url.startswith(web)]
    blocks: list[Block] = [{"type": "actions", "elements": buttons}] if buttons else []
    if others:
        context = _mrkdwn_object(" · ".join(others), SECTION_TEXT_MAX)
        blocks.append({"type": "context", "elements": [context]})
    return blocks


def build_message(event: IncidentEvent, links: MessageLinks) -> SlackMessage:
    """One message for one incident state change."""
    title = visible(f"Incident {event.state.value}: {event.detector} on {event.subject}")
    header = {
        "type": "header",
        "text": {"type": "plain_text", "text": _clip(title, HEADER_MAX), "emoji": True},
    }
    facts = [
        _field("Detector", _mrkdwn(event.detector)),
        _field("Severity", _mrkdwn(event.severity.value)),
        _field("Subject", _code(event.subject)),
        _field("Incident", f"{_code(event.incident_id)} (rev {event.revision})"),
        _field("Mode before", _code(event.mode_before)),
        _field("Mode after", _code(event.mode_after)),
    ]
    blocks: list[Block] = [
        header,
        _section(f"{_ICON[event.state]} {_mrkdwn(event.summary)}"),
        {"type": "section", "fields": facts},
    ]
    blocks += _evidence_blocks(event)
    # Resolved, the fleet is back or a human took it; held, the thread must say how out.
    if event.state is not IncidentState.RESOLVED or event.mode_after == HELD_ROUND_ROBIN.label:
        blocks.append(_section(_resume_text(event, links.guard_db_url)))
    blocks += _link_blocks(links)
    change = f"{event.mode_before} -> {event.mode_after}"
    if event.mode_before == event.mode_after:
        said = f"{event.summary} (fleet stays on {event.mode_after})"
    else:
        said = f"{event.summary} (mode {change})" if change not in event.summary else event.summary
    text = _clip(
        f"[{event.state.value}] {_mrkdwn(event.incident_id)} {_mrkdwn(event.detector)} on "
        f"{_mrkdwn(event.subject)}: {_mrkdwn(said)}",  # the change once ("fleet a -> b" says it)
        SECTION_TEXT_MAX,
    )
    return SlackMessage(text, blocks[:BLOCKS_MAX])
