"""`slaguard emulate`: one emulated vLLM replica of a card type, on a local port."""

from __future__ import annotations

import typer
import uvicorn

from slaguard.cli.errors import fail
from slaguard.cli.listen import SERVER_SETTINGS, check_can_listen
from slaguard.emulator.app import create_emulator_app
from slaguard.fleet import FleetError, Target, build_fleet
from slaguard.fleet.catalogue import builtin_cards, builtin_models
from slaguard.service.listen_port import port_problem

_SOURCE = "emulate"


def emulate(
    card: str = typer.Option(..., "--card", help="Card type, e.g. l40s, h100, ascend910b."),
    model: str = typer.Option("llama3.1-8b", "--model", help="Model id from the catalogue."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel size."),
    port: int = typer.Option(8000, "--port", help="Listen port (1 to 65535)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Listen address."),
    speedup: float = typer.Option(
        1.0,
        "--speedup",
        help="Run this many times faster than the card (tests, demos): above 0, at most 10000.",
    ),
) -> None:
    """Serve an OpenAI-compatible emulated replica with vLLM-style /metrics."""
    if (problem := port_problem(port, any_free=False)) is not None:
        fail(f"--port: {problem}")
    if not 0 < speedup <= 10_000:
        fail(f"--speedup: {speedup} is out of range; fix: use a value in (0, 10000]")
    target = _target(card, model, tp)
    check_can_listen(host, port, port_fix="--port", host_fix="--host")
    app = create_emulator_app(target, speedup=speedup)
    uvicorn.run(app, host=host, port=port, log_level="warning", **SERVER_SETTINGS)


def _target(card: str, model: str, tp: int) -> Target:
    """The replica as a one-target fleet; a mistake names the flag, not the fleet file's
    field (`targets[0].card`) nor its fix (`add it under 'cards:'`)."""
    cards, models = builtin_cards(), builtin_models()
    if card not in cards:
        fail(f"--card: unknown card type {card!r}; fix: use one of {sorted(cards)}")
    if model not in models:
        fail(f"--model: unknown model {model!r}; fix: use one of {sorted(models)}")
    spec = {"id": f"{card}-{model}", "model": model, "card": card, "tp": tp}
    try:
        return build_fleet({"targets": [spec]}, _SOURCE).targets[0]
    except FleetError as exc:  # what is left is about the card's memory: --tp
        fail(str(exc).replace(f"{_SOURCE}: targets[0].tp:", "--tp:", 1))
