"""Fault scenarios: the issue's schema exactly, one-line errors, answers at simulated time."""

from __future__ import annotations

from pathlib import Path

import pytest

from slaguard.fleet import Fleet, load_fleet
from slaguard.sim.faults import (
    FaultError,
    FaultSchedule,
    HotPromptFault,
    load_faults,
    parse_faults,
)

ISSUE_SCHEMA = (Path(__file__).parent / "fixtures" / "issue3_faults.yaml").read_text("utf-8")
"""The scenario schema exactly as issue 3 writes it (placeholders included)."""

DEFAULT_FLEET_SCENARIO = (
    ISSUE_SCHEMA.replace("<target id or card type>", "l40s")
    .replace("<target id>", "h100-70b-0")
    .replace("<model id>", "llama3.1-70b")
)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return load_fleet()


def test_the_issue_schema_is_accepted_exactly() -> None:
    schedule = parse_faults(ISSUE_SCHEMA, "issue.yaml")
    assert [f.kind for f in schedule.faults] == [
        "jitter",
        "fail",
        "hot_prompt",
        "new_model",
        "load_spike",
    ]
    assert schedule.change_times() == (600, 900, 1200, 1500, 1800, 2000, 2300)


def test_answers_at_simulated_time(fleet: Fleet, tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(DEFAULT_FLEET_SCENARIO, encoding="utf-8")
    schedule = load_faults(path, fleet)
    l40s, h100_70b, h100_8b = (fleet.target(t) for t in ("l40s-8b-3", "h100-70b-0", "h100-8b-0"))
    assert schedule.latency_factor(l40s, 899.9) == 1.0
    assert schedule.latency_factor(l40s, 900.0) == 3.0
    assert schedule.latency_factor(l40s, 1500.0) == 1.0  # end is exclusive
    assert schedule.latency_factor(h100_8b, 1000.0) == 1.0
    assert schedule.latency_factor(h100_70b, 1799.0) == 1.0
    assert schedule.latency_factor(h100_70b, 3599.0) == 1.8  # new model stays live
    assert schedule.latency_factor(h100_8b, 3599.0) == 1.0
    assert not schedule.is_failed("h100-70b-0", 1199.9)
    assert schedule.is_failed("h100-70b-0", 1200.0)
    assert not schedule.is_failed("h100-70b-1", 1500.0)
    assert not schedule.is_failed("h100-70b-0", 1800.0)
    hot = schedule.hot_prompt(700.0)
    assert isinstance(hot, HotPromptFault) and (hot.share, hot.prompt_tokens) == (0.3, 6000)
    assert schedule.hot_prompt(900.0) is None
    assert schedule.arrival_rate_factor(2100.0) == 2.5
    assert schedule.arrival_rate_factor(2300.0) == 1.0
    assert schedule.report_rows()[3] == {
        "kind": "new_model",
        "target": "llama3.1-70b",
        "start_s": 1800.0,
        "end_s": None,
    }
    assert schedule.report_rows()[2]["target"] is None


def test_overlapping_jitters_multiply_and_card_type_matches_all_its_targets(fleet: Fleet) -> None:
    schedule = parse_faults(
        "faults:\n"
        "  - {kind: jitter, target: h100, start_s: 0, end_s: 100, factor: 2}\n"
        "  - {kind: jitter, target: h100-8b-1, start_s: 50, end_s: 100, factor: 1.5}\n",
        fleet=fleet,
    )
    assert schedule.latency_factor(fleet.target("h100-8b-0"), 60) == 2.0
    assert schedule.latency_factor(fleet.target("h100-8b-1"), 60) == 3.0
    assert schedule.latency_factor(fleet.target("h100-70b-1"), 10) == 2.0
    assert schedule.latency_factor(fleet.target("h200-8b"), 10) == 1.0


def test_extra_fields_are_welcome() -> None:
    schedule = parse_faults(
        "name: rehearsal\nowner: sre\nfaults:\n"
        "  - {kind: load_spike, start_s: 1, end_s: 2, factor: 2, note: Black Friday}\n"
    )
    assert schedule.faults[0].model_extra == {"note": "Black Friday"}
    assert parse_faults("").faults == () and parse_faults("faults:\n").faults == ()


def test_unknown_keys_are_named_top_level_and_per_entry() -> None:
    schedule = parse_faults(
        "name: rehearsal\nfaults:\n  - {kind: fail, target: x, start_s: 1, end_s: 2, end: 3}\n",
        "s.yaml",
    )
    assert schedule.notes[0] == (
        "s.yaml:1: name: not a scenario key, ignored (the file's only key is faults)"
    )
    assert schedule.notes[1].startswith("s.yaml:3: faults[0].end: not a field of a fail fault")


def test_a_missing_field_names_the_misspelt_key_beside_it() -> None:
    """`end:` for `end_s:` (the docs' own example typo) said only `end_s: Field required`:
    the warning naming `end:` was never printed, the run having been refused first."""
    with pytest.raises(FaultError) as caught:
        parse_faults(
            "faults:\n  - {kind: jitter, target: l40s, start_s: 1, end: 5, factr: 3}\n", "s.yaml"
        )
    assert str(caught.value) == (
        "s.yaml:2: faults[0].end_s: Field required; fix: add the field (the key 'end' here is "
        "probably a typo of it)"
    )
    with pytest.raises(FaultError) as caught:
        parse_faults("faults:\n  - {kind: fail, target: x, start_s: 1, ends: 5}\n", "s.yaml")
    assert str(caught.value).endswith("(the key 'ends' here is probably a typo of it)")
    with pytest.raises(FaultError) as caught:  # nothing near it: the plain fix
        parse_faults("faults:\n  - {kind: fail, target: x, start_s: 1, owner: sre}\n", "s.yaml")
    assert str(caught.value).endswith("end_s: Field required; fix: add the field")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "# a typo\nfault:\n  - {kind: fail, target: x, start_s: 1, end_s: 2}\n",
            "s.yaml:2: fault: unknown key 'fault' and no `faults:`; "
            "fix: did you mean `faults:`? rename it",
        ),
        (
            "Faults: []\n",
            "s.yaml:1: Faults: unknown key 'Faults' and no `faults:`; "
            "fix: did you mean `faults:`? rename it",
        ),
        (
            "name: rehearsal\n",
            "s.yaml:1: name: unknown key 'name' and no `faults:`; fix: add `faults:` entries",
        ),
    ],
)
def test_a_file_without_faults_but_other_keys_is_refused(text: str, message: str) -> None:
    """`fault:` for `faults:` ran with no faults and only a warning."""
    with pytest.raises(FaultError) as caught:
        parse_faults(text, "s.yaml")
    assert str(caught.value) == message


BAD = [
    (
        "faults:\n  - kind: jitter\n    target: x\n    start_s: 1\n    end_s: 2\n",
        "2",
        "faults[0].factor: Field required",
        "add the field",
    ),
    (
        "faults:\n  - {kind: fail, target: x, start_s: 1, end_s: 2}\n  - kind: meltdown\n",
        "3",
        "faults[1]: Input tag 'meltdown'",
        "use a kind among jitter, fail",
    ),
    (
        "faults:\n  - kind: load_spike\n    start_s: 1\n    end_s: 2\n    factor: -1\n",
        "5",
        "faults[0].factor: Input should be greater than 0 (got -1)",
        "use a larger value",
    ),
    (
        "faults:\n  - {kind: fail, target: x, start_s: 10, end_s: 5}\n",
        "2",
        "end_s (5.0) must be after start_s (10.0)",
        "correct the value",
    ),
    (
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 1.5, prompt_tokens: 10}\n",
        "2",
        "faults[0].share: Input should be less than or equal to 1",
        "use a smaller value",
    ),
    ("faults:\n  - {start_s: 1}\n", "2", "faults[0]: Unable to extract tag", "add `kind:`"),
    ("faults: {kind: fail}\n", "1", "faults: Input should be a valid list", "as a list"),
    (
        "faults:\n  - {kind: jitter, target: x, start_s: 1, end_s: soon, factor: 2}\n",
        "2",
        "faults[0].end_s: Input should be a valid number, unable to parse string as a number "
        "(got 'soon')",
        "write a number such as 3, 2.5 or 1e3",
    ),
    (
        "faults:\n  - kind: jitter\n    target: x\n    start_s: 1\n    end_s: 2\n"
        "    factor: true\n",
        "6",
        "faults[0].factor: Input should be a number, not true or false (got true)",
        "true/false are not numbers",
    ),
    (
        "faults:\n  - {kind: fail, target: x, start_s: 5, end_s: .inf}\n",
        "2",
        "faults[0].end_s: Input should be a finite number (got inf)",
        "write a finite number",
    ),
    (
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 0.5, prompt_tokens: 6e3}\n",
        "2",
        "faults[0].prompt_tokens: Input should be a valid integer (got '6e3')",
        "write a whole number in digits, such as 6000 (no quotes, no 6e3, 60.5 or true)",
    ),
    (
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 0.5, prompt_tokens: 60.5}\n",
        "2",
        "faults[0].prompt_tokens: Input should be a valid integer (got 60.5)",
        "whole number",
    ),
    (
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 0.5, prompt_tokens: 9,"
        " output_tokens: false}\n",
        "2",
        "faults[0].output_tokens: Input should be a valid integer (got false)",
        "whole number",
    ),
    (  # an OverflowError traceback
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 0.5, prompt_tokens: 9,"
        " output_tokens: 99999999999999999999}\n",
        "2",
        "faults[0].output_tokens: Input should be less than or equal to 16777216",
        "use a smaller value",
    ),
    (  # a MemoryError traceback
        "faults:\n  - {kind: hot_prompt, start_s: 1, end_s: 2, share: 0.5,"
        " prompt_tokens: 99999999999999999999}\n",
        "2",
        "faults[0].prompt_tokens: Input should be less than or equal to 16777216",
        "use a smaller value",
    ),
    ("faults: [\n", "2", "invalid YAML", "correct the syntax"),
    ("- a\n- b\n", "1", "not a mapping", "start the file with `faults:`"),
]


def test_numbers_yaml_reads_as_text_are_numbers() -> None:
    """YAML 1.1 reads `1e3` and `5e-1` (no dot) as text; refused for a day as "not a valid
    number" with the fix "write an unquoted number", which they were. Fleet files take
    them too; a quoted number is read alike."""
    schedule = parse_faults(
        "faults:\n"
        "  - {kind: load_spike, start_s: 1e3, end_s: 2e3, factor: 3}\n"
        "  - {kind: hot_prompt, start_s: 1.0e3, end_s: '1500', share: 5e-1, prompt_tokens: 9}\n"
        "  - {kind: new_model, model: m, start_s: 2E3, latency_factor: 1.5e0}\n"
        "  - {kind: jitter, target: x, start_s: 0, end_s: 1e2, factor: 2e0}\n"
    )
    assert schedule.change_times() == (0.0, 100.0, 1000.0, 1500.0, 2000.0)
    hot = schedule.hot_prompt(1200.0)
    assert hot is not None and hot.share == 0.5
    assert schedule.arrival_rate_factor(1999.0) == 3.0


@pytest.mark.parametrize(("text", "line", "problem", "fix"), BAD)
def test_bad_scenarios_are_one_line_with_file_line_field_and_fix(
    tmp_path: Path, text: str, line: str, problem: str, fix: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FaultError) as caught:
        load_faults(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: ")
    assert problem in message and "; fix: " in message and fix in message


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        (
            "{kind: jitter, target: tpu-v5, start_s: 0, end_s: 1, factor: 2}",
            "faults[0].target: unknown target or card type 'tpu-v5' in fleet 'default-mixed'",
        ),
        (
            "{kind: fail, target: h100, start_s: 0, end_s: 1}",
            "faults[0].target: unknown target 'h100'",
        ),
        (
            "{kind: new_model, model: llama2-70b, start_s: 0, latency_factor: 2}",
            "faults[0].model: model 'llama2-70b' is not served by fleet",
        ),
    ],
)
def test_names_are_checked_against_the_fleet(fleet: Fleet, fault: str, problem: str) -> None:
    with pytest.raises(FaultError) as caught:
        parse_faults(f"faults:\n  - {fault}\n", "s.yaml", fleet)
    assert str(caught.value).startswith(f"s.yaml:2: {problem}")  # the line of the name
    assert "; fix: " in str(caught.value)
    parse_faults(f"faults:\n  - {fault}\n", "s.yaml")  # no fleet: names are not checked


def test_missing_file_and_empty_schedule(fleet: Fleet) -> None:
    with pytest.raises(FaultError, match=r"nope\.yaml: file not found; fix: "):
        load_faults("nope.yaml")
    empty = FaultSchedule()
    assert empty.latency_factor(fleet.targets[0], 5.0) == 1.0
    assert empty.arrival_rate_factor(5.0) == 1.0 and empty.hot_prompt(5.0) is None
    assert not empty.is_failed(fleet.targets[0].id, 5.0) and empty.report_rows() == []


@pytest.mark.parametrize(
    ("tokens", "said"),
    [
        ("prompt_tokens: 200000", "200000 tokens"),
        ("prompt_tokens: 131000, output_tokens: 1000", "131000 + 1000 output_tokens = 132000"),
    ],
)
def test_a_hot_prompt_no_model_of_the_fleet_can_take_is_refused(
    fleet: Fleet, tokens: str, said: str
) -> None:
    """Taken before: every hot arrival was rejected, so the run rehearsed refusals (86 of
    191 requests in a minute) instead of a hot spot, with no word why."""
    text = f"faults:\n  - {{kind: hot_prompt, start_s: 0, end_s: 60, share: 0.5, {tokens}}}\n"
    with pytest.raises(FaultError) as caught:
        parse_faults(text, "s.yaml", fleet)
    assert str(caught.value) == (
        f"s.yaml:2: faults[0].prompt_tokens: {said} is above every context window in fleet "
        "'default-mixed' (131072 tokens at most), so each hot prompt would be refused, not "
        "served; fix: use at most 131072 tokens in all"
    )
    fits = "faults:\n  - {kind: hot_prompt, start_s: 0, end_s: 60, share: 0.5, prompt_tokens: "
    assert parse_faults(fits + "131072}\n", "s.yaml", fleet).faults[0].kind == "hot_prompt"
