"""Block Kit messages for incident events, within Slack's limits.

Limits: header text <= 150 chars, section text <= 3,000, <= 10 fields per section, <= 50
blocks; a plain `text` fallback is always set (notifications and screen readers use it).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from slaguard.guard.events import IncidentEvent, IncidentState

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


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """`text` fallback plus Block Kit blocks."""

    text: str
    blocks: list[Block]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(label: str, value: object) -> Block:
    return {"type": "mrkdwn", "text": _clip(f"*{label}*\n{value}", FIELD_TEXT_MAX)}


def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _clip(text, SECTION_TEXT_MAX)}}


def resume_command(event: IncidentEvent) -> str:
    """The exact CLI line that puts the fleet back on the gray rollout."""
    reason = f"incident {event.incident_id} reviewed"
    return f"slaguard resume --stage {event.resume_stage_pct} --reason {shlex.quote(reason)}"


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
            _section(f"*{verdict['detector']}* on `{verdict['subject']}`: {verdict['summary']}")
        )
        numbers = _numbers(verdict.get("evidence", {}))[:FIELDS_MAX]
        if numbers:
            blocks.append({"type": "section", "fields": [_field(k, v) for k, v in numbers]})
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
    others = [f"{label}: `{url}`" for label, url in pairs if not url.startswith(web)]
    blocks: list[Block] = [{"type": "actions", "elements": buttons}] if buttons else []
    if others:
        blocks.append(
            {"type": "context", "elements": [{"type": "mrkdwn", "text": " · ".join(others)}]}
        )
    return blocks


def build_message(event: IncidentEvent, links: MessageLinks) -> SlackMessage:
    """One message for one incident state change."""
    title = f"Incident {event.state.value}: {event.detector} on {event.subject}"
    header = {
        "type": "header",
        "text": {"type": "plain_text", "text": _clip(title, HEADER_MAX), "emoji": True},
    }
    facts = [
        _field("Detector", event.detector),
        _field("Severity", event.severity.value),
        _field("Subject", f"`{event.subject}`"),
        _field("Incident", f"`{event.incident_id}` (rev {event.revision})"),
        _field("Mode before", f"`{event.mode_before}`"),
        _field("Mode after", f"`{event.mode_after}`"),
    ]
    blocks: list[Block] = [
        header,
        _section(f"{_ICON[event.state]} {event.summary}"),
        {"type": "section", "fields": facts},
    ]
    blocks += _evidence_blocks(event)
    if event.state is not IncidentState.RESOLVED:
        blocks.append(
            _section(f"To resume the learned policy once it is safe:\n`{resume_command(event)}`")
        )
    blocks += _link_blocks(links)
    text = _clip(
        f"[{event.state.value}] {event.incident_id} {event.detector} on {event.subject}: "
        f"{event.summary} (mode {event.mode_before} -> {event.mode_after})",
        SECTION_TEXT_MAX,
    )
    return SlackMessage(text, blocks[:BLOCKS_MAX])
