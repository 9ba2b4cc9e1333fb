"""Block Kit builders: required content and Slack's limits."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakes.incidents import incident

from slaguard.guard.events import IncidentState
from slaguard.notify.messaging import (
    BLOCKS_MAX,
    FIELDS_MAX,
    HEADER_MAX,
    SECTION_TEXT_MAX,
    MessageLinks,
    build_message,
    from_mrkdwn,
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


RESUME = "slaguard resume --stage 10 --reason 'incident inc-300-1 reviewed'"


@pytest.mark.parametrize(
    ("guard_db_url", "command"),
    [
        (
            "postgresql+psycopg://slaguard:s3cret@db.internal:5432/audit",
            f"{RESUME} --db postgresql+psycopg://slaguard@db.internal:5432/audit",
        ),
        (  # libpq's password option: it went to Slack with the rest of the URL
            "postgresql+psycopg://slaguard@db.internal/audit?password=s3cret&sslmode=require",
            f"{RESUME} --db 'postgresql+psycopg://slaguard@db.internal/audit?sslmode=require'",
        ),
        (
            "sqlite:////var/lib/slaguard/audit.db",
            f"{RESUME} --db sqlite:////var/lib/slaguard/audit.db",
        ),
    ],
)
def test_the_resume_command_acts_on_the_guards_database(guard_db_url: str, command: str) -> None:
    """Without `--db` an on-call copying the command resumed ./slaguard.db, not the
    database the guard tripped in; its password is left out (`***` pasted failed to
    connect), for libpq to take from the on-call's environment."""
    event = incident()
    msg = build_message(event, replace(LINKS, guard_db_url=guard_db_url))
    assert resume_command(event, guard_db_url) == command
    section = next(b["text"]["text"] for b in msg.blocks if "slaguard resume" in repr(b))
    where = (
        " (the database password from `PGPASSWORD` or `~/.pgpass`)"
        if "s3cret" in guard_db_url
        else ""
    )
    assert section == f"To resume the learned policy once it is safe{where}:\n`{command}`"
    assert "s3cret" not in repr(msg.blocks) + msg.text
    assert "***" not in command  # a masked password pasted is a wrong password


def test_a_resume_command_whose_database_is_not_known_says_how_to_give_it() -> None:
    msg = build_message(incident(), LINKS)
    section = next(b["text"]["text"] for b in msg.blocks if "slaguard resume" in repr(b))
    assert section == (
        "To resume the learned policy once it is safe (on the guard's database: add `--db "
        "URL`, or set `SLAGUARD_DB`; without either it acts on ./slaguard.db):\n"
        f"`{RESUME}`"
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


def test_a_resolution_by_a_hold_says_how_to_leave_it() -> None:
    """The hold resolves the incident, and nothing automatic leaves it: the thread's last
    message is where an on-call looks for the way back."""
    held = replace(incident(IncidentState.RESOLVED, 2), mode_after="held_round_robin")
    body = _texts(build_message(held, LINKS).blocks)
    assert "Nothing automatic leaves the hold. To resume once it is safe" in body
    assert "slaguard resume --stage 10 --reason 'incident inc-300-1 reviewed'" in body


HOSTILE = "9f3a<!channel> <http://evil|click> & `x` *b*\r\nfake: line"
"""A prefix id a client chose: a channel ping, a fake link, a code span breaker, a CR/LF."""


def test_client_text_is_escaped_everywhere_slack_parses_it() -> None:
    event = incident(subject=f"prefix:{HOSTILE}", summary=f"prefix {HOSTILE} has 31% of traffic")
    verdict = event.evidence["verdicts"][0]
    verdict["evidence"] = {"shares": {HOSTILE: 0.31}, "top_prefix": HOSTILE}
    msg = build_message(event, MessageLinks("https://grafana.example/d/guard", "docs/`rb`.md"))
    escaped = "9f3a&lt;!channel&gt; &lt;http://evil|click&gt; &amp; "
    in_code = f"`prefix:{escaped}ˋxˋ *b*\\r\\nfake: line`"
    assert msg.text == (
        f"[opened] inc-300-1 hot_spot on prefix:{escaped}`x` *b*\\r\\nfake: line: prefix "
        f"{escaped}`x` *b*\\r\\nfake: line has 31% of traffic (mode rollout(10) -&gt; round_robin)"
    )
    header, summary, facts, verdict_line, numbers, resume, buttons, links = msg.blocks
    assert header["text"] == {
        "type": "plain_text",
        "text": f"Incident opened: hot_spot on prefix:{HOSTILE}".replace("\r\n", "\\r\\n"),
        "emoji": True,
    }
    assert summary["text"]["text"] == (
        f":red_circle: prefix {escaped}`x` *b*\\r\\nfake: line has 31% of traffic"
    )
    assert facts["fields"][2]["text"] == f"*Subject*\n{in_code}"
    assert verdict_line["text"]["text"].startswith(f"*hot_spot* on {in_code}: prefix {escaped}")
    assert [f["text"] for f in numbers["fields"]] == [
        f"*shares.{escaped}`x` *b*\\r\\nfake: line*\n0.31",
        f"*top_prefix*\n{escaped}`x` *b*\\r\\nfake: line",
    ]
    assert resume["text"]["text"].endswith(
        "`slaguard resume --stage 10 --reason 'incident inc-300-1 reviewed'`"
    )
    assert buttons["type"] == "actions"
    assert links["elements"][0]["text"] == "Runbook: `docs/ˋrbˋ.md`"
    mrkdwn = [summary["text"], *facts["fields"], verdict_line["text"], *numbers["fields"]]
    assert all(m["type"] == "mrkdwn" and m["verbatim"] is True for m in mrkdwn)


def test_a_cut_never_leaves_half_an_escape() -> None:
    msg = build_message(incident(summary="<" * 5000), LINKS)
    text = msg.blocks[1]["text"]["text"]
    assert len(text) <= SECTION_TEXT_MAX and text.endswith("&lt;…")
    assert text == ":red_circle: " + "&lt;" * 746 + "…"


@pytest.mark.parametrize("text", ["a >= b -> c", "x &lt; y", "&amp;gt; <!here> & <a|b>", "plain"])
def test_a_slack_text_reads_back_as_the_channel_shows_it(text: str) -> None:
    """The demo printed the escaped Slack text: `(&gt;= 20%)`, `learned -&gt; round_robin`."""
    shown = from_mrkdwn(build_message(incident(summary=text), LINKS).text)
    assert text in shown


def test_the_fallback_text_says_the_mode_change_once() -> None:
    """An opening's summary ends "fleet learned -> round_robin"; the text then added
    "(mode learned -> round_robin)", its arrow unescaped."""
    opened = incident(summary="l40s tier slow; fleet learned -> round_robin")
    opened = replace(opened, mode_before="learned", mode_after="round_robin")
    text = build_message(opened, MessageLinks("", "")).text
    assert text.endswith(": l40s tier slow; fleet learned -&gt; round_robin"), text
    assert text.count("round_robin") == 1


def test_an_update_without_a_switch_says_the_fleet_stays() -> None:
    """An update while the fleet stays on round-robin read "(mode round_robin ->
    round_robin)", or repeated the opening's switch: on call, a second rollback."""
    update = replace(
        incident(state=IncidentState.UPDATED, summary="also: prefix b hot"),
        mode_before="round_robin",
        mode_after="round_robin",
    )
    text = build_message(update, MessageLinks("", "")).text
    assert text.endswith(": also: prefix b hot (fleet stays on round_robin)"), text
