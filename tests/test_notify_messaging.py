"""Block Kit builders: required content and Slack's limits."""

from __future__ import annotations

from fakes.incidents import incident

from slaguard.guard.events import IncidentState
from slaguard.notify.messaging import (
    BLOCKS_MAX,
    FIELDS_MAX,
    HEADER_MAX,
    SECTION_TEXT_MAX,
    MessageLinks,
    build_message,
    resume_command,
)

LINKS = MessageLinks("https://grafana.example/d/guard", "https://runbooks.example/guard")


def _texts(blocks: list[dict]) -> str:
    return repr(blocks)


def test_opened_message_carries_everything_an_on_call_needs() -> None:
    event = incident()
    msg = build_message(event, LINKS)
    assert msg.text.startswith("[opened] inc-300-1 hot_spot on prefix:9f3a")
    assert msg.blocks[0]["type"] == "header"
    body = _texts(msg.blocks)
    for needle in (
        "*Detector*\\nhot_spot",
        "*Severity*\\ncritical",
        "`prefix:9f3a`",
        "`inc-300-1`",
        "*Mode before*\\n`rollout(10)`",
        "*Mode after*\\n`round_robin`",
        "*share*\\n0.31",
        "*trip_share*\\n0.2",
        "slaguard resume --stage 10 --reason 'incident inc-300-1 reviewed'",
    ):
        assert needle in body, needle
    buttons = next(b for b in msg.blocks if b["type"] == "actions")["elements"]
    assert [b["url"] for b in buttons] == [LINKS.dashboard_url, LINKS.runbook_url]
    assert (
        resume_command(event) == "slaguard resume --stage 10 --reason 'incident inc-300-1 reviewed'"
    )


def test_limits_hold_for_oversized_input() -> None:
    event = incident(summary="x" * 10_000, subject="prefix:" + "y" * 400)
    msg = build_message(event, LINKS)
    assert len(msg.blocks) <= BLOCKS_MAX
    assert len(msg.blocks[0]["text"]["text"]) <= HEADER_MAX
    for block in msg.blocks:
        if block["type"] == "section":
            assert len(block.get("text", {}).get("text", "")) <= SECTION_TEXT_MAX
            assert len(block.get("fields", [])) <= FIELDS_MAX
    assert len(msg.text) <= SECTION_TEXT_MAX


def test_resolved_has_no_resume_command_and_relative_links_are_text() -> None:
    msg = build_message(
        incident(IncidentState.RESOLVED, 2),
        MessageLinks("http://localhost:3000/d/x", "docs/guard.md#runbook"),
    )
    body = _texts(msg.blocks)
    assert "slaguard resume" not in body and msg.text.startswith("[resolved]")
    actions = [b for b in msg.blocks if b["type"] == "actions"]
    assert [e["url"] for e in actions[0]["elements"]] == ["http://localhost:3000/d/x"]
    assert "Runbook: `docs/guard.md#runbook`" in body
