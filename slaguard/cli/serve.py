"""`slaguard serve`: the routing API and gateway with its loops, audit writer and guard."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer
import uvicorn

from slaguard.audit.engine import DatabaseUrlError, db_url_source, resolve_db_url
from slaguard.audit.migrate import SchemaNotCurrentError
from slaguard.audit.spill import SpillInUseError
from slaguard.audit.writer_settings import WriterStartError
from slaguard.cli.dbopen import check_sqlite_directory
from slaguard.cli.errors import fail
from slaguard.cli.listen import SERVER_SETTINGS, check_can_listen
from slaguard.cli.paths import path_option
from slaguard.fleet import FleetError
from slaguard.notify.factory import NotifyConfigError
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import ENV_PREFIX, ServiceConfigError, admin_token, load_config


def _db_source(flag: str | None, config_file: Path | None, configured: str | None) -> str:
    """Where serve's database URL came from, to name it in a refusal."""
    if flag is not None:
        return "--db"
    if f"{ENV_PREFIX}DB" in {k.upper() for k in os.environ}:
        return f"${ENV_PREFIX}DB"
    if config_file is not None and configured is not None:
        return f"{config_file}: db"
    return db_url_source(None, "--db")  # $SLAGUARD_DB, or the default in ./


def serve(
    config_file: Path | None = path_option(
        None, "--config", help="YAML config (see examples/serve.yaml); env SLAGUARD_SERVE_*."
    ),
    fleet_file: Path | None = path_option(None, "--fleet", help="Fleet file (default: built-in)."),
    db: str | None = typer.Option(None, "--db", help="Audit DB URL or SQLite file path."),
    host: str | None = typer.Option(None, "--host", help="Listen address (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Listen port (default 8080)."),
) -> None:
    """Serve the routing API and the OpenAI-compatible gateway."""
    try:
        cfg = load_config(config_file, {"fleet": fleet_file, "db": db, "host": host, "port": port})
        check_sqlite_directory(resolve_db_url(cfg.db), _db_source(db, config_file, cfg.db))
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
