"""`slaguard serve`: the routing API and gateway with its loops, audit writer and guard."""

from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import Any

import typer
import uvicorn

from slaguard.audit.engine import DatabaseUrlError
from slaguard.audit.migrate import SchemaNotCurrentError
from slaguard.audit.spill import SpillInUseError
from slaguard.cli.errors import fail
from slaguard.fleet import FleetError
from slaguard.notify.factory import NotifyConfigError
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import ServiceConfigError, admin_token, load_config

SERVER_SETTINGS: dict[str, Any] = {
    "loop": "uvloop",
    "http": "httptools",
    "access_log": False,
    "proxy_headers": False,
    "server_header": False,
}
"""uvicorn for an API answered in well under a millisecond of CPU: uvloop and httptools
(h11 cost ~2x the CPU per request on the 2-core box), no access log line per request,
no X-Forwarded-For rewriting (nothing reads the client address) and no `server` header:
each of the last two is a few us per request."""


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
        _check_can_listen(cfg.host, cfg.port)
        service = build_service(cfg)
    except (
        ServiceConfigError,
        FleetError,
        DatabaseUrlError,
        NotifyConfigError,
        SchemaNotCurrentError,
    ) as exc:
        fail(str(exc))
    except SpillInUseError as exc:
        fail(
            f"audit spill journal: {exc}; fix: give each replica its own spill_dir "
            "(config field, or SLAGUARD_SERVE_SPILL_DIR)"
        )
    logging.basicConfig(
        level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
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


def _check_can_listen(host: str, port: int) -> None:
    """Refuse a taken or unusable address in one line before migrating, spawning the audit
    writer and taking guard leadership (uvicorn would find out only after all that)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        fix = (
            "pick a free port (--port or SLAGUARD_SERVE_PORT) or stop what listens there"
            if exc.errno == errno.EADDRINUSE
            else "use an address of this machine (--host or SLAGUARD_SERVE_HOST)"
        )
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; fix: {fix}")
