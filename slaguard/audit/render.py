"""Output for `slaguard audit`: a rich table on the terminal, or csv / json / parquet.

Multi-part answers (`explain`, `incident`) print every part as a table; as json they are
one object with every part; as csv/parquet, which hold one table, they write the main
part (explain: the candidates; incident: the per-target phases).

Table cells, titles and headers hold data clients and operators wrote (request ids,
prefix ids, reasons): each is a rich `Text` with its control characters written out,
never parsed as markup (`[/x]` in a request id was a MarkupError) nor sent to the
terminal raw.
"""

from __future__ import annotations

import math
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pandas as pd  # type: ignore[import-untyped]
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from slaguard.audit.formats import OutputFormat
from slaguard.audit.incident_timeline import IncidentTimeline
from slaguard.audit.isotime import ISO_FORMAT, iso_utc
from slaguard.audit.models import utc_from_unix
from slaguard.audit.service import DecisionExplanation
from slaguard.plaintext import inert


def _shown(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value is pd.NaT or value is pd.NA:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, datetime | pd.Timestamp):
        return _iso(value)
    if isinstance(value, dict | list):
        return msgspec.json.encode(value).decode()
    return str(value)


def counted(n: int, one: str, many: str | None = None) -> str:
    """`1 row`, `2 rows`: "(1 rows)" headed a one-row table."""
    return f"{n} {one}" if n == 1 else f"{n} {many or one + 's'}"


def plain(value: Any) -> Text:
    """A value as terminal text: compact, no markup, control characters written out."""
    return inert(_shown(value))


WHOLE_COLUMNS = frozenset({"request_id", "subject", "slack_ts"})
"""Never wrapped nor cut, nor is a time: a request id is pasted into `audit explain` (a
48-hex id was shown as `c42b9dcfc4c54b59985c00000000…`), an incident's subject and Slack
thread are looked up, its times were cut to `2026-11-30T16:…`."""


def _whole(frame: pd.DataFrame, name: str) -> bool:
    return name in WHOLE_COLUMNS or pd.api.types.is_datetime64_any_dtype(frame[name].dtype)


def frame_table(frame: pd.DataFrame, title: str) -> Table:
    """A DataFrame as a rich Table, numbers right-aligned and compact. A column too narrow
    for a word folds it (rich's default cut headers to `notification_s…` on a narrow table
    whose data cells wrapped)."""
    table = Table(title=plain(title), title_justify="left")
    for name in frame.columns:
        numeric = pd.api.types.is_numeric_dtype(frame[name].dtype)
        table.add_column(
            plain(name),
            justify="right" if numeric else "left",
            no_wrap=_whole(frame, name),
            overflow="fold",
        )
    for row in frame.itertuples(index=False):
        table.add_row(*(plain(v) for v in row))
    return table


def _console() -> Console:
    return Console(width=max(Console().width, 160), soft_wrap=False)


def _print_table(table: Table) -> None:
    """Print `table`, as wide as its narrowest layout when it has `WHOLE_COLUMNS`: any
    narrower, rich shrinks every column alike, those too (the terminal wraps the line)."""
    console = _console()
    if any(column.no_wrap for column in table.columns):
        # measured unbounded: within the console's width rich reports the shrunk layout
        unbounded = console.options.update_width(1_000_000)
        need = Measurement.get(console, unbounded, table).minimum
        # rich's minimum of a column is its longest word, unwrapped or not: a subject
        # with spaces counted as one word, and the columns after it were cut to fit
        for column in table.columns:
            if column.no_wrap:
                cells = [Measurement.get(console, unbounded, c) for c in column.cells]
                need += max((m.maximum - m.minimum for m in cells), default=0)
        if need > console.width:
            console = Console(width=need, soft_wrap=False)
    console.print(table)


def _iso(value: datetime) -> str:
    """The one form of a time in every output (`isotime`); a Timestamp made from float
    seconds carries nanoseconds of float noise, rounded off."""
    if isinstance(value, pd.Timestamp):
        value = value.round("us").to_pydatetime()
    return iso_utc(value)


def _text_times(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its time columns in that form: csv wrote pandas' own
    (`2026-11-29 14:00:05.250000+00:00`)."""
    times = [c for c in frame.columns if isinstance(frame[c].dtype, pd.DatetimeTZDtype)]
    if not times:
        return frame
    text = frame.copy()
    for name in times:
        text[name] = frame[name].dt.tz_convert(UTC).dt.round("us").dt.strftime(ISO_FORMAT)
    return text


EVIDENCE_TIMES = frozenset({"at_s", "opened_at_s", "next_attempt_s"})
"""The keys under which the guard writes Unix seconds into an incident's evidence (its
verdicts, `updates` and outbox); its other `_s` keys are durations."""


def _evidence_times(value: Any) -> Any:
    """Evidence with those times in ISO 8601, as every other time of the output
    (`updates[].at_s` read 1796084909.22899); what is stored keeps its numbers."""
    if isinstance(value, dict):
        return {
            k: _iso(utc_from_unix(v)) if k in EVIDENCE_TIMES and _unix(v) else _evidence_times(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_evidence_times(v) for v in value]
    return value


def _unix(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _with_iso_times(fields: dict[str, Any]) -> dict[str, Any]:
    """msgspec writes a datetime itself (`Z`, never through the hook): give it text."""
    return {k: _iso(v) if isinstance(v, datetime) else v for k, v in fields.items()}


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | pd.Timestamp):
        return _iso(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    raise TypeError(f"cannot encode {type(value).__name__}")


def _frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    clean = frame.astype(object).where(frame.notna(), None)
    records: list[dict[str, Any]] = clean.to_dict(orient="records")
    return records


def _write_json(payload: Any, output: Path | None) -> None:
    data = msgspec.json.format(msgspec.json.encode(payload, enc_hook=_json_default), indent=2)
    if output is None:
        sys.stdout.write(data.decode() + "\n")
    else:
        output.write_bytes(data + b"\n")


def _write_single(frame: pd.DataFrame, fmt: OutputFormat, output: Path | None) -> None:
    if fmt is OutputFormat.CSV:
        _text_times(frame).to_csv(output if output is not None else sys.stdout, index=False)
    elif fmt is OutputFormat.PARQUET:
        if output is None:
            raise ValueError("--format parquet needs --output FILE.parquet")
        frame.to_parquet(output, index=False)
    else:
        _write_json(_frame_records(frame), output)


def emit_frame(frame: pd.DataFrame, fmt: OutputFormat, output: Path | None, title: str) -> None:
    """One table in the requested format (stdout unless `output`)."""
    if fmt is OutputFormat.TABLE:
        _print_table(frame_table(frame, f"{title} ({counted(len(frame), 'row')})"))
        return
    _write_single(frame, fmt, output)


def _pairs_table(title: str, pairs: dict[str, Any]) -> Table:
    table = Table(title=plain(title), title_justify="left", show_header=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")  # evidence JSON: every number, wrapped
    for key, value in pairs.items():
        table.add_row(plain(key), plain(value))
    return table


def emit_explanation(expl: DecisionExplanation, fmt: OutputFormat, output: Path | None) -> None:
    """Why one request went where it went."""
    if fmt is OutputFormat.JSON:
        _write_json(
            {
                "decision": _with_iso_times(expl.decision),
                "outcome": None if expl.outcome is None else _with_iso_times(expl.outcome),
                "weights": expl.weights,
                "candidates": _frame_records(expl.candidates),
                "rejected": _frame_records(expl.rejected),
                "other": expl.other,
            },
            output,
        )
        return
    if fmt is not OutputFormat.TABLE:
        _write_single(expl.candidates, fmt, output)
        return
    console = _console()
    rid = expl.decision["request_id"]
    console.print(_pairs_table(f"decision {rid}", expl.decision))
    if expl.outcome is not None:
        console.print(_pairs_table("outcome", expl.outcome))
    else:
        console.print("outcome: none recorded")
    console.print(_pairs_table("weights", expl.weights))
    _print_table(frame_table(expl.candidates, _candidates_title(expl.candidates)))
    _print_table(frame_table(expl.rejected, "rejected targets"))
    if expl.other:
        console.print(_pairs_table("more from the explanation", expl.other))


def _candidates_title(candidates: pd.DataFrame) -> str:
    """What the candidates' order means: round-robin stores no scores, and lists them in
    the fleet's order, which its rotation follows (it took the next eligible in turn)."""
    if "score" in candidates.columns:
        return "eligible candidates, best score first"
    return "eligible candidates, round-robin order (no scores)"


def _decisions_in(tl: IncidentTimeline, phase: str) -> str:
    """How many decisions a phase holds: a simulated run's incident is resolved at the
    run's end, and its empty "after" phase was only rows missing from the table."""
    n = int(tl.per_target.loc[tl.per_target["phase"] == phase, "decisions"].sum())
    return counted(n, "decision") if n else "no decisions"


def emit_timeline(tl: IncidentTimeline, fmt: OutputFormat, output: Path | None) -> None:
    """An incident's evidence, mode switches and per-target phases."""
    rec = tl.incident.record
    header = {
        "id": tl.incident.id, "detector": rec.detector, "severity": rec.severity,
        "subject": rec.subject,
        "opened": utc_from_unix(rec.opened_at_s),
        "resolved": None if rec.resolved_at_s is None else utc_from_unix(rec.resolved_at_s),
        "notification": rec.notification_state, "slack": rec.slack_ts,
        "evidence": _evidence_times(dict(rec.evidence)),
    }  # fmt: skip
    if fmt is OutputFormat.JSON:
        _write_json(
            {
                "incident": _with_iso_times(header),
                "phases": {k: [_iso(a), _iso(b)] for k, (a, b) in tl.phases.items()},
                "mode_changes": _frame_records(tl.mode_changes),
                "per_target": _frame_records(tl.per_target),
            },
            output,
        )
        return
    if fmt is not OutputFormat.TABLE:
        _write_single(tl.per_target, fmt, output)
        return
    console = _console()
    console.print(_pairs_table(f"incident {tl.incident.id}", header))
    held = {k: _decisions_in(tl, k) for k in tl.phases}
    if rec.resolved_at_s is None:
        held["during"] += "; now: still open"
    phases = {k: f"{_shown(a)} .. {_shown(b)} ({held[k]})" for k, (a, b) in tl.phases.items()}
    if rec.resolved_at_s is None:
        phases["after"] = "none yet: the incident is open"
    console.print(_pairs_table("phases", phases))
    _print_table(frame_table(tl.mode_changes, "mode changes"))
    _print_table(frame_table(tl.per_target, "per target, before / during / after"))
