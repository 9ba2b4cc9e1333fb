"""`slaguard serve`: the routing API and gateway with its loops, audit writer and guard."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
from pathlib import Path
from typing import Any, NoReturn

import typer
import uvicorn
from uvicorn.config import LOGGING_CONFIG

from slaguard.audit.engine import (
    DatabaseUrlError,
    db_url_source,
    default_spill_dir,
    resolve_db_url,
)
from slaguard.audit.migrate import SchemaNotCurrentError
from slaguard.audit.spill import SpillDirUnsafeError, SpillInUseError, unsafe_directory
from slaguard.audit.writer_settings import WriterStartError
from slaguard.cli.dbopen import check_sqlite_directory, check_sqlite_file
from slaguard.cli.errors import USER_ERROR_EXIT, fail
from slaguard.cli.listen import SERVER_SETTINGS, check_can_listen
from slaguard.cli.paths import path_option
from slaguard.fleet import FleetError
from slaguard.logjson import log_json_to_stderr
from slaguard.notify.factory import NotifyConfigError
from slaguard.service.app import create_app
from slaguard.service.bootstrap import build_service
from slaguard.service.config import (
    ENV_PREFIX,
    ServiceConfig,
    ServiceConfigError,
    load_config,
)
from slaguard.service.credentials import admin_token, backend_api_key


def _db_source(flag: str | None, config_file: Path | None, configured: str | None) -> str:
    """Where serve's database URL came from, to name it in a refusal."""
    if flag is not None:
        return "--db"
    if f"{ENV_PREFIX}DB" in {k.upper() for k in os.environ}:
        return f"${ENV_PREFIX}DB"
    if config_file is not None and configured is not None:
        return f"{config_file}: db"
    return db_url_source(None, "--db")  # $SLAGUARD_DB, or the default in ./


def _listen_source(field: str, flag: object, config_file: Path | None, cfg: ServiceConfig) -> str:
    """Where the listen address's `host` or `port` came from, to name it in a refusal
    (a file's `host:` was blamed on `--host or SLAGUARD_SERVE_HOST`)."""
    variable = f"{ENV_PREFIX}{field.upper()}"
    if flag is not None:
        return f"--{field}"
    if variable in {k.upper() for k in os.environ}:
        return f"${variable}"
    if config_file is not None and field in cfg.model_fields_set:
        return f"{config_file}: {field}"
    return f"the default; set --{field}, ${variable} or the config's {field}"


def check_config_fleet(flag: Path | None, config_file: Path | None, cfg: ServiceConfig) -> None:
    """A fleet file the config or `$SLAGUARD_SERVE_FLEET` names and that is not there,
    refused naming that source. A relative path is read from the working directory, not
    the config's: examples/serve.yaml run from elsewhere said only "examples/fleet.yaml:
    file not found", naming nothing the user wrote. Other mistakes are the loader's."""
    path = cfg.fleet
    if flag is not None or path is None or path.exists():
        return
    if f"{ENV_PREFIX}FLEET" in {k.upper() for k in os.environ}:
        source = f"${ENV_PREFIX}FLEET"
    elif config_file is not None:
        source = f"{config_file}: fleet"
    else:
        return
    if path.is_absolute():
        fail(f"{source}: {path}: file not found; fix: pass an existing fleet file")
    fail(
        f"{source}: {path}: file not found in the working directory {Path.cwd()}; fix: give "
        "the fleet file's path from the working directory (not from the config's), or an "
        "absolute one"
    )


def _spill_source(config_file: Path | None, configured: Path | None, path: Path) -> str:
    """Where the spill directory came from, to name it in a refusal."""
    if configured is None:
        return f"spill_dir (default {path}, beside the database)"
    if f"{ENV_PREFIX}SPILL_DIR" in {k.upper() for k in os.environ}:
        return f"${ENV_PREFIX}SPILL_DIR"
    return f"{config_file}: spill_dir"


def _spill_refusal(source: str, problem: str) -> str:
    return (
        f"{source}: {problem}; fix: name a directory this user may create or write, one per "
        f"replica (config field spill_dir, or ${ENV_PREFIX}SPILL_DIR)"
    )


def check_spill_dir(path: Path, source: str) -> None:
    """The audit writer makes the directory when it starts, after the database is
    migrated; a file in the way or an unwritable parent was a traceback there. Checked
    without creating anything, so a later refusal leaves nothing behind."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        what = f"{path} is" if probe == path else f"{probe} (a parent of {path}) is"
        fail(_spill_refusal(source, f"{what} not a directory"))
    if not os.access(probe, os.W_OK | os.X_OK):
        fail(_spill_refusal(source, f"{probe} is not writable by this user"))
    if (problem := unsafe_directory(path)) is not None:
        fail(f"{source}: {problem}")
    if probe != path:  # made and removed at once: `/proc/x` passes the checks above
        first = next(p for p in (path, *path.parents) if p.parent == probe)
        try:
            first.mkdir(mode=0o700)
            first.rmdir()
        except OSError as exc:
            fail(_spill_refusal(source, f"cannot create {first}: {exc.strerror}"))


def _on_spill_path(filename: object, directory: Path) -> bool:
    """Whether an OSError's file is the spill directory, inside it or one of its parents."""
    if not isinstance(filename, str | os.PathLike):
        return False
    name, spill = Path(filename).absolute(), directory.absolute()
    return name == spill or spill in name.parents or name in spill.parents


def _configure_logging(cfg: ServiceConfig) -> dict[str, Any] | None:
    """Set the log format; returns the `log_config` for uvicorn. Text keeps uvicorn's own
    handlers (`INFO:     Started server process`); JSON hands uvicorn none (`None`: it
    leaves logging as it is), so its loggers propagate to the root's JSON handler."""
    level = cfg.log_level.upper()
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if cfg.log_format == "json":
        log_json_to_stderr(level)
        return None
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return LOGGING_CONFIG


def _refuse(message: str, *, as_json: bool) -> NoReturn:
    """`fail`, or once JSON logging is set, the same text as one ERROR record (exit 2): a
    plain line among the JSON ones is one a log shipper cannot parse."""
    if as_json:
        logging.getLogger(__name__).error("%s", message)
        raise typer.Exit(USER_ERROR_EXIT)
    fail(message)


def serve(
    config_file: Path | None = path_option(
        None, "--config", help="YAML config (see examples/serve.yaml); env SLAGUARD_SERVE_*."
    ),
    fleet_file: Path | None = path_option(None, "--fleet", help="Fleet file (default: built-in)."),
    db: str | None = typer.Option(None, "--db", help="Audit DB URL or SQLite file path."),
    host: str | None = typer.Option(None, "--host", help="Listen address (default 127.0.0.1)."),
    port: int | None = typer.Option(
        None, "--port", help="Listen port (default 8080; 0: any free port)."
    ),
) -> None:
    """Serve the routing API and the OpenAI-compatible gateway."""
    spill: Path | None = None
    spill_source = "spill_dir"
    as_json = False  # until the log format is set: a mistake before is a plain line
    try:
        cfg = load_config(config_file, {"fleet": fleet_file, "db": db, "host": host, "port": port})
        check_config_fleet(fleet_file, config_file, cfg)
        db_source = _db_source(db, config_file, cfg.db)
        check_sqlite_directory(resolve_db_url(cfg.db), db_source)
        check_sqlite_file(resolve_db_url(cfg.db), db_source)
        token = admin_token()
        backend_key = backend_api_key()
        check_can_listen(
            cfg.host,
            cfg.port,
            port_fix=_listen_source("port", port, config_file, cfg),
            host_fix=_listen_source("host", host, config_file, cfg),
        )
        spill = cfg.spill_dir or default_spill_dir(resolve_db_url(cfg.db))
        spill_source = _spill_source(config_file, cfg.spill_dir, spill)
        check_spill_dir(spill, spill_source)
        # Before the build, so the writer's replay of a left journal and a failed
        # migration are logged like the rest; Alembic's own INFO lines stay out of it.
        uvicorn_logging = _configure_logging(cfg)
        as_json = cfg.log_format == "json"
        service = build_service(cfg)
    except (
        ServiceConfigError,
        FleetError,
        DatabaseUrlError,
        NotifyConfigError,
        SchemaNotCurrentError,
    ) as exc:
        _refuse(str(exc), as_json=as_json)
    except WriterStartError as exc:
        _refuse(str(exc), as_json=as_json)
    except SpillDirUnsafeError as exc:  # made so since the check above
        _refuse(f"{spill_source}: {exc}", as_json=as_json)
    except SpillInUseError as exc:
        _refuse(
            f"audit spill journal: {exc}; fix: give each replica its own spill_dir "
            "(config field, or SLAGUARD_SERVE_SPILL_DIR)",
            as_json=as_json,
        )
    except OSError as exc:  # what the check cannot foresee (`/proc/x`: ENOENT on mkdir)
        if spill is None or not _on_spill_path(exc.filename, spill):
            raise
        _refuse(
            _spill_refusal(spill_source, f"cannot create {exc.filename}: {exc.strerror}"),
            as_json=as_json,
        )
    if token is None:
        logging.getLogger("slaguard").warning(
            "no $SLAGUARD_ADMIN_TOKEN: /v1/mode and /v1/alertmanager are disabled"
        )
    app = create_app(
        service.runtime,
        admin_token=token,
        backend_key=backend_key,
        readiness=service.readiness,
        on_shutdown=service.close,
    )
    # `kill -USR1 PID`: every thread's stack on stderr, as plain text even with JSON logs
    # (a stalled loop's runbook asks for one before the restart); the service goes on.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        uvicorn.run(
            app,
            host=cfg.host,
            port=cfg.port,
            log_level=cfg.log_level,
            log_config=uvicorn_logging,
            **SERVER_SETTINGS,
        )
    finally:
        service.close()  # when the server stopped without its lifespan's shutdown
