"""`slaguard serve`: the routing API and gateway with its loops, audit writer and guard."""

from __future__ import annotations

import logging
from pathlib import Path

import typer
import uvicorn

from slaguard.audit.engine import DatabaseUrlError
from slaguard.audit.migrate import SchemaNotCurrentError
from slaguard.audit.spill import SpillInUseError
from slaguard.audit.writer_settings import WriterStartError
from slaguard.cli.errors import fail
from slaguard.cli.listen import SERVER_SETTINGS, check_can_listen
from slaguard.fleet import FleetError
from slaguard.notify.factory import NotifyConfigError
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import ServiceConfigError, admin_token, load_config


def serve(
    config_file: Path | None = typer.Option(
        None, "--config", help="YAML config (see examples/serve.yaml); env SLAGUARD_SERVE_*."
    ),
    fleet_file: Path | None = typer.Option(None, "--fleet", help="Fleet file (default: built-in)."),
    db: str | None = typer.Option(None, "--db", help="Audit DB URL or SQLite file path."),
    host: str | None = typer.Option(None, "--host", help="Listen address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Listen port (default 8080)."),
) -> None:
    """Serve the routing API and the OpenAI-compatible gateway."""
    try:
        cfg = load_config(config_file, {"fleet": fleet_file, "db": db, "host": host, "port": port})
        token = admin_token()
        check_can_listen(
            cfg.host,
            cfg.port,
            port_fix="--port or SLAGUARD_SERVE_PORT",
            host_fix="--host or SLAGUARD_SERVE_HOST",
        )
        # Before the build, so the writer's replay of a left journal and a failed
        # migration are logged like the rest; Alembic's own INFO lines stay out of it.
        logging.basicConfig(
            level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        logging.getLogger("alembic").setLevel(logging.WARNING)
        service = build_service(cfg)
    except (
        ServiceConfigError,
        FleetError,
        DatabaseUrlError,
        NotifyConfigError,
        SchemaNotCurrentError,
    ) as exc:
        fail(str(exc))
    except WriterStartError as exc:
        fail(str(exc))
    except SpillInUseError as exc:
        fail(
            f"audit spill journal: {exc}; fix: give each replica its own spill_dir "
            "(config field, or SLAGUARD_SERVE_SPILL_DIR)"
        )
    if token is None:
        logging.getLogger("slaguard").warning(
            "no $SLAGUARD_ADMIN_TOKEN: /v1/mode and /v1/alertmanager are disabled"
        )
    app = create_app(
        service.runtime,
        admin_token=token,
        readiness=service.readiness,
        on_shutdown=service.close,
    )
    try:
        uvicorn.run(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level=cfg.log_level,
            **SERVER_SETTINGS,
        )
    finally:
        service.close()  # when the server stopped without its lifespan's shutdown
