"""Fault scenarios (YAML): what goes wrong, where and when, for incident rehearsal.

The schema of issue 3 is accepted as written. Extra fields, in an entry or beside
`faults:`, are kept and each named in a warning (`FaultSchedule.notes`), not rejected; a
file with keys but no `faults:` (`fault:` for `faults:`) is refused, as it would mean
nothing. Times, factors and shares are finite numbers, never true/false, and may be text
that reads as one (YAML 1.1 reads `1e3` as text); token counts are whole numbers as
written. A `FaultSchedule` answers the engine's questions at simulated time `now_s` without
I/O: a target's latency factor, whether it has failed, the active hot prompt, the
arrival-rate factor. Arrival-side faults (load_spike, hot_prompt) are applied to the trace
up front by `arrival_faults.apply_arrival_faults`, deterministically for a seed.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from slaguard.fleet import Fleet, Target
from slaguard.fleet.validation import Number as _FleetNumber
from slaguard.userfiles import parse_user_yaml, read_user_text, yaml_error_line

KINDS = ("jitter", "fail", "hot_prompt", "new_model", "load_spike")
ARRIVAL_KINDS = ("hot_prompt", "load_spike")
"""Applied to the trace's arrivals up front; the other kinds act on targets."""


MAX_SLOWDOWN = 1000.0
"""A card 1,000x slower has stopped; write a `fail` fault."""
MAX_LOAD_FACTOR = 100.0
"""Arrivals are copied in memory: x100 of an hour-long trace is already ~2M requests."""
MAX_HOT_TOKENS = 1 << 24
"""Bound on a hot prompt's token counts before any fleet is known: 1e20 was an
OverflowError or a MemoryError traceback (one prefix block id per 512 tokens)."""


Number = Annotated[_FleetNumber, Field(strict=False)]
"""A finite float, as fleet files take it: `1e3` (text to YAML 1.1) and `"2.5"` are read,
true/false are not. Not strict where the scenario models are, for the text."""


class FaultError(ValueError):
    """A scenario mistake, worded as one line: `file:line: field: problem; fix: ...`."""


class _Window(BaseModel):
    # strict: `"3"` or 2.5 is not a token count; Number fields take `1e3` but never `true`
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False, strict=True)

    start_s: Number = Field(ge=0)
    end_s: Number = math.inf

    @model_validator(mode="after")
    def _ordered(self) -> _Window:
        if not self.end_s > self.start_s:
            raise ValueError(f"end_s ({self.end_s}) must be after start_s ({self.start_s})")
        return self

    def active(self, now_s: float) -> bool:
        return self.start_s <= now_s < self.end_s


class JitterFault(_Window):
    """Latency of a target (by id) or of every target on a card type multiplied by factor."""

    kind: Literal["jitter"]
    target: str = Field(min_length=1)
    end_s: Number
    factor: Number = Field(gt=0, le=MAX_SLOWDOWN)


class FailFault(_Window):
    """The target stops answering; its in-flight requests fail."""

    kind: Literal["fail"]
    target: str = Field(min_length=1)
    end_s: Number


class HotPromptFault(_Window):
    """One identical prompt (same prefix blocks) as `share` of the arrivals in the window."""

    kind: Literal["hot_prompt"]
    end_s: Number
    share: Number = Field(gt=0, le=1)
    prompt_tokens: int = Field(gt=0, le=MAX_HOT_TOKENS)
    output_tokens: int | None = Field(default=None, gt=0, le=MAX_HOT_TOKENS)


class NewModelFault(_Window):
    """A new version of `model` goes live at start_s; its replicas run `latency_factor` slower."""

    kind: Literal["new_model"]
    model: str = Field(min_length=1)
    latency_factor: Number = Field(gt=0, le=MAX_SLOWDOWN)


class LoadSpikeFault(_Window):
    """Arrivals in the window multiplied by factor (extra copies or thinning)."""

    kind: Literal["load_spike"]
    end_s: Number
    factor: Number = Field(gt=0, le=MAX_LOAD_FACTOR)


Fault = Annotated[
    JitterFault | FailFault | HotPromptFault | NewModelFault | LoadSpikeFault,
    Field(discriminator="kind"),
]


_KIND_MODELS: dict[str, type[_Window]] = dict(
    zip(KINDS, (JitterFault, FailFault, HotPromptFault, NewModelFault, LoadSpikeFault), strict=True)
)


class FaultScenario(BaseModel):
    """The whole file: `faults:` and anything else the author wants to keep alongside."""

    model_config = ConfigDict(extra="allow", strict=True)

    faults: list[Fault] = Field(default_factory=list)


@dataclass(frozen=True)
class FaultSchedule:
    """Answers "what is broken at now_s?" for the engine; pure, no clock reads."""

    faults: tuple[Fault, ...] = ()
    source: str = "<no faults>"
    notes: tuple[str, ...] = ()
    """Warnings for the author: keys the schema does not know (kept, but ignored)."""

    def latency_factor(self, target: Target, now_s: float) -> float:
        """Product of active jitters on the target or its card type, and new-model slowdowns."""
        factor = 1.0
        for fault in self.faults:
            if not fault.active(now_s):
                continue
            if isinstance(fault, JitterFault) and fault.target in (target.id, target.card.id):
                factor *= fault.factor
            elif isinstance(fault, NewModelFault) and fault.model == target.model.id:
                factor *= fault.latency_factor
        return factor

    def is_failed(self, target_id: str, now_s: float) -> bool:
        return any(
            isinstance(f, FailFault) and f.target == target_id and f.active(now_s)
            for f in self.faults
        )

    def hot_prompt(self, now_s: float) -> HotPromptFault | None:
        """The hot prompt active at now_s (the first one listed, if windows overlap)."""
        for fault in self.faults:
            if isinstance(fault, HotPromptFault) and fault.active(now_s):
                return fault
        return None

    def arrival_rate_factor(self, now_s: float) -> float:
        factor = 1.0
        for fault in self.faults:
            if isinstance(fault, LoadSpikeFault) and fault.active(now_s):
                factor *= fault.factor
        return factor

    def change_times(self) -> tuple[float, ...]:
        """Every time any answer can change, sorted: the engine may cache between them."""
        times = {f.start_s for f in self.faults} | {f.end_s for f in self.faults}
        return tuple(sorted(t for t in times if math.isfinite(t)))

    def report_rows(self) -> list[dict[str, Any]]:
        """`faults` entries of the simulate report: {kind, target, start_s, end_s}."""
        rows: list[dict[str, Any]] = []
        for f in self.faults:
            subject = (
                f.target
                if isinstance(f, JitterFault | FailFault)
                else (f.model if isinstance(f, NewModelFault) else None)
            )
            end = f.end_s if math.isfinite(f.end_s) else None
            rows.append({"kind": f.kind, "target": subject, "start_s": f.start_s, "end_s": end})
        return rows


def _node_line(root: yaml.Node | None, loc: tuple[int | str, ...]) -> int | None:
    """Line (1-based) of the YAML node a validation error points at, as deep as it exists."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            child = node.value[part] if part < len(node.value) else None
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line


def _key_line(root: yaml.Node | None, key: object) -> int:
    """Line of a top-level key itself (its value, a list, may start on the next line)."""
    keys = root.value if isinstance(root, yaml.MappingNode) else []
    return next((k.start_mark.line + 1 for k, _ in keys if k.value == str(key)), 1)


def _field(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_FIXES = {
    "missing": "add the field",
    "greater_than": "use a larger value",
    "greater_than_equal": "use a larger value",
    "less_than_equal": "use a smaller value",
    "float_type": "write a number such as 3, 2.5 or 1e3",
    "float_parsing": "write a number such as 3, 2.5 or 1e3",
    "number_type": "write a number such as 3 or 2.5 (true/false are not numbers)",
    "finite_number": "write a finite number",
    "int_type": "write a whole number in digits, such as 6000 (no quotes, no 6e3, 60.5 or true)",
    "string_type": "write a name",
    "union_tag_invalid": f"use a kind among {', '.join(KINDS)}",
    "union_tag_not_found": f"add `kind:` ({', '.join(KINDS)})",
    "list_type": "write `faults:` as a list of entries",
    "model_type": "write a mapping of fields",
}


def _typo_beside(raw: dict[str, Any], loc: tuple[Any, ...]) -> str:
    """For a missing field, the entry's unknown key that looks like it (`end:` for
    `end_s:`): its warning is never printed, the file being refused first."""
    entry: Any = raw
    for part in loc[:-1]:
        try:
            entry = entry[part]
        except (KeyError, IndexError, TypeError):
            return ""
    if not isinstance(entry, dict):
        return ""
    kind = entry.get("kind")
    model = _KIND_MODELS.get(kind) if isinstance(kind, str) else None
    unknown = [str(k) for k in entry if model is None or k not in model.model_fields]
    near = difflib.get_close_matches(str(loc[-1]), unknown, n=1)
    return f" (the key {near[0]!r} here is probably a typo of it)" if near else ""


def _validation_error(
    source: str, root: yaml.Node | None, exc: ValidationError, raw: dict[str, Any]
) -> FaultError:
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if p not in KINDS)
    line = _node_line(root, loc)
    where = f"{source}:{line}" if line is not None else source
    value = err.get("input")
    text = str(value).lower() if isinstance(value, bool) else repr(value)  # as YAML spells it
    shown = f" (got {text})" if not isinstance(value, dict | list) and value is not None else ""
    fix = _FIXES.get(err["type"], "correct the value")
    if err["type"] == "missing":
        fix += _typo_beside(raw, loc)
    message = str(err["msg"]).removeprefix("Value error, ")
    return FaultError(f"{where}: {_field(loc) or 'faults'}: {message}{shown}; fix: {fix}")


def check_against_fleet(
    schedule: FaultSchedule, fleet: Fleet, root: yaml.Node | None = None
) -> None:
    """Every named target, card type and model must exist in the fleet (the error names
    the line when `root`, the parsed YAML, is given)."""
    target_ids = {t.id for t in fleet.targets}
    card_types = set(fleet.card_types())
    served = {t.model.id for t in fleet.targets}
    widest = max(t.model.context_window for t in fleet.targets)
    for i, f in enumerate(schedule.faults):
        key = {NewModelFault: "model", HotPromptFault: "prompt_tokens"}.get(type(f), "target")
        line = _node_line(root, ("faults", i, key)) if root is not None else None
        where = f"{schedule.source}:{line}" if line is not None else schedule.source
        field = f"faults[{i}]"
        if isinstance(f, JitterFault) and f.target not in target_ids | card_types:
            raise FaultError(
                f"{where}: {field}.target: unknown target or card type {f.target!r} "
                f"in fleet {fleet.name!r}; fix: use a target id or one of {sorted(card_types)}"
            )
        if isinstance(f, FailFault) and f.target not in target_ids:
            raise FaultError(
                f"{where}: {field}.target: unknown target {f.target!r} in fleet "
                f"{fleet.name!r}; fix: use a target id such as {sorted(target_ids)[0]!r}"
            )
        if isinstance(f, HotPromptFault):
            _check_hot_prompt_fits(f, f"{where}: {field}", fleet.name, widest)
        if isinstance(f, NewModelFault) and f.model not in served:
            raise FaultError(
                f"{where}: {field}.model: model {f.model!r} is not served by fleet "
                f"{fleet.name!r}; fix: use one of {sorted(served)}"
            )


def _check_hot_prompt_fits(f: HotPromptFault, where: str, fleet_name: str, widest: int) -> None:
    """A hot prompt no model of the fleet can take was rejected at every arrival, so the
    run rehearsed refusals instead of a hot spot, with no word why."""
    total = f.prompt_tokens + (f.output_tokens or 0)
    if total <= widest:
        return
    said = (
        f"{f.prompt_tokens} + {f.output_tokens} output_tokens = {total}"
        if f.output_tokens
        else f"{total} tokens"
    )
    raise FaultError(
        f"{where}.prompt_tokens: {said} is above every context window in fleet "
        f"{fleet_name!r} ({widest} tokens at most), so each hot prompt would be refused, not "
        f"served; fix: use at most {widest} tokens in all"
    )


def parse_faults(text: str, source: str = "<faults>", fleet: Fleet | None = None) -> FaultSchedule:
    """Validate scenario text; raise FaultError naming file, line, field and the fix."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        line = yaml_error_line(exc)
        where = f":{line}" if line is not None else ""
        raise FaultError(f"{source}{where}: invalid YAML; fix: correct the syntax") from None
    raw = parse_user_yaml(text, source, FaultError)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise FaultError(f"{source}:1: not a mapping; fix: start the file with `faults:`")
    if "faults" not in raw and raw:  # `fault:` for `faults:`: the file would mean nothing
        key = str(next(iter(raw)))
        near = difflib.get_close_matches(key.lower(), ["faults"], cutoff=0.6)
        raise FaultError(
            f"{source}:{_key_line(root, key)}: {key}: unknown key {key!r} and no `faults:`; "
            f"fix: {'did you mean `faults:`? rename it' if near else 'add `faults:` entries'}"
        )
    if raw.get("faults") is None:
        raw = {**raw, "faults": []}
    try:
        scenario = FaultScenario.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(source, root, exc, raw) from None
    schedule = FaultSchedule(tuple(scenario.faults), source, _unknown_keys(source, root, raw))
    if fleet is not None:
        check_against_fleet(schedule, fleet, root)
    return schedule


def _unknown_keys(source: str, root: yaml.Node | None, raw: dict[str, Any]) -> tuple[str, ...]:
    """Keys the file or a fault kind does not have: kept (the schema welcomes more fields),
    but a typo like `end:` for `end_s:` would otherwise silently change the scenario."""
    notes = [
        f"{source}:{_key_line(root, key)}: {key}: not a scenario key, ignored "
        "(the file's only key is faults)"
        for key in raw
        if key != "faults"
    ]
    if not raw["faults"]:
        notes.append(f"{source}: no `faults:` entries: the run has no faults")
    for i, entry in enumerate(raw.get("faults") or []):
        kind = _KIND_MODELS.get(entry.get("kind", "")) if isinstance(entry, dict) else None
        if kind is None:
            continue
        for key in entry:
            if key not in kind.model_fields:
                line = _node_line(root, ("faults", i, key))
                known = ", ".join(k for k in kind.model_fields if k != "kind")
                notes.append(
                    f"{source}:{line}: faults[{i}].{key}: not a field of a {entry['kind']} "
                    f"fault, ignored (its fields: {known})"
                )
    return tuple(notes)


def load_faults(path: str | Path, fleet: Fleet | None = None) -> FaultSchedule:
    """Read and validate a scenario file (checked against `fleet` when given)."""
    p = Path(path)
    text = read_user_text(p, FaultError, "scenario file")
    return parse_faults(text, str(p), fleet)
