"""`slaguard serve` configuration: one YAML file, overridden by `SLAGUARD_SERVE_*` variables.

Precedence (highest first): command-line flags, environment (`SLAGUARD_SERVE_PORT=9000`,
nested with `__`: `SLAGUARD_SERVE_GATEWAY__CONNECT_TIMEOUT_S=1`), the YAML file, defaults.
A mistake is refused at start as one line naming the file, the field and the fix. The
admin bearer token and the backends' API key are never read from the file: only from
`$SLAGUARD_ADMIN_TOKEN` and `$SLAGUARD_BACKEND_API_KEY` (or their `_FILE` variants), so they
do not end up in a repository.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from slaguard.audit.engine import DatabaseUrlError, resolve_db_url
from slaguard.fleet.validation import Whole
from slaguard.guard.config import Flag, ServeGuardConfig
from slaguard.service.config_env_json import not_json
from slaguard.service.config_sections import (
    AlertmanagerConfig,
    GatewayConfig,
    LoopsConfig,
    RolloutConfig,
    TelemetryConfig,
)
from slaguard.service.listen_port import port_problem
from slaguard.userfiles import load_user_yaml

ENV_PREFIX = "SLAGUARD_SERVE_"
ADMIN_TOKEN_ENV = "SLAGUARD_ADMIN_TOKEN"


class ServiceConfigError(ValueError):
    """A configuration mistake as one line: `source: field: problem; fix: ...`."""


class ServiceConfig(BaseSettings):
    """Everything `slaguard serve` needs; see docs/service.md for each field."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
    )

    fleet: Path | None = Field(default=None, description="fleet file; default: built-in")
    db: str | None = Field(default=None, description="audit DB URL; default: $SLAGUARD_DB")
    migrate: Flag = Field(default=True, description="create/upgrade the audit schema at start")
    spill_dir: Path | None = Field(
        default=None,
        description="audit spill journal, one per replica; default beside the SQLite file",
    )
    host: str = "127.0.0.1"
    port: Whole = 8080
    max_pending_decisions: Whole = Field(default=200_000, ge=100, le=10_000_000)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    alertmanager: AlertmanagerConfig = Field(default_factory=AlertmanagerConfig)
    loops: LoopsConfig = Field(default_factory=LoopsConfig)
    guard: ServeGuardConfig = Field(
        default_factory=ServeGuardConfig, description="detectors and breaker (docs/guard.md)"
    )
    notify_file: Path | None = Field(
        default=None, description="incident messages as JSON lines here (else $SLAGUARD_*)"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = Field(
        default="text", description="json: one JSON object a line on stderr (Loki, Elasticsearch)"
    )

    _file_values: ClassVar[dict[str, Any]] = {}
    """The config file as `load_user_yaml` read it (YAML 1.2 booleans, duplicate keys
    refused), set by `load_config`: pydantic-settings' YAML source would read the file
    again with PyYAML's `safe_load`, where `migrate: yes` is true."""

    @field_validator("fleet", "db", "spill_dir", "notify_file", mode="before")
    @classmethod
    def _not_blank(cls, value: Any) -> Any:
        """A blank path is the working directory (`Path("")` is "."): the spill journal
        landed there; a blank `db` fell back to the default database."""
        if isinstance(value, str) and not value.strip():
            raise ValueError(
                f"blank ({value!r}); fix: give a path, or leave the setting out (unset the "
                "variable) for its default"
            )
        return value

    @field_validator("port")
    @classmethod
    def _a_port(cls, port: int) -> int:
        if (problem := port_problem(port, any_free=True)) is not None:
            raise ValueError(problem)
        return port

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, _TypedEnv(settings_cls)]
        if cls._file_values:
            sources.append(InitSettingsSource(settings_cls, cls._file_values))
        return tuple(sources)


class _TypedEnv(EnvSettingsSource):
    """The environment, each whole number or flag read as its field's type first: a
    variable is text by nature (`..._AUTO_RETURN=true`, `..._TRIP_AFTER=5`), while the
    file's `trip_after: true` or `auto_return: "yes"` is a mistake the strict fields
    refuse. A flag is `true` or `false` in any case, as in the file (pydantic's lax bool
    took `yes`, `1`, `off`); a whole number is digits (pydantic's lax int took `9000.0`,
    `1_000`, `+9000`). A text that does not read as the type is left for the field's own
    error."""

    def __call__(self) -> dict[str, Any]:
        return _typed(self.settings_cls, super().__call__())


class _FlagText:
    """`true` or `false` in any case (YAML's `True`, `FALSE`), nothing else."""

    @staticmethod
    def validate_python(text: str) -> bool:
        if text.lower() not in ("true", "false"):
            raise ValueError(text)
        return text.lower() == "true"


class _WholeText:
    """Digits, with a minus sign for a bound's own words (`-5`: "at least 1")."""

    @staticmethod
    def validate_python(text: str) -> int:
        if re.fullmatch(r"-?[0-9]+", text) is None:
            raise ValueError(text)
        return int(text)


_READERS: dict[Any, Any] = {int: _WholeText, bool: _FlagText}


def _typed(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for key, value in values.items():
        field = model.model_fields.get(key)
        if field is None:
            continue
        kind = field.annotation
        if isinstance(value, dict) and isinstance(kind, type) and issubclass(kind, BaseModel):
            out[key] = _typed(kind, value)
        elif isinstance(value, str) and kind in _READERS:
            with contextlib.suppress(ValueError):  # its own error names the variable
                out[key] = _READERS[kind].validate_python(value.strip())
    return out


def _field_path(loc: tuple[int | str, ...]) -> str:
    """`rollout.stages_pct[1]` from pydantic's ('rollout', 'stages_pct', 1)."""
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    return path.lstrip(".") or "<top>"


def load_config(
    path: Path | None = None, overrides: Mapping[str, Any] | None = None
) -> ServiceConfig:
    """Read the YAML file (if any), apply the environment, then `overrides` (CLI flags)."""
    source = str(path) if path is not None else "environment"
    if path is not None:
        raw = load_user_yaml(path, ServiceConfigError, "YAML config file")
        if raw is not None and not isinstance(raw, dict):
            raise ServiceConfigError(f"{path}: <top>: not a mapping; fix: write `key: value` lines")
    kwargs: dict[str, Any] = {k: v for k, v in (overrides or {}).items() if v is not None}
    _check_variable_names(os.environ)
    cls: type[ServiceConfig] = ServiceConfig
    if path is not None:

        class _FromFile(ServiceConfig):
            _file_values = raw or {}

        cls = _FromFile
    try:
        config = cls(**kwargs)
    except ValidationError as exc:
        raise ServiceConfigError(_config_error(exc.errors()[0], source, kwargs)) from None
    try:
        resolve_db_url(config.db, _db_source(source, kwargs))
    except DatabaseUrlError as exc:
        raise ServiceConfigError(str(exc)) from None
    return config


def _check_variable_names(env: Mapping[str, str]) -> None:
    """Refuse a `SLAGUARD_SERVE_*` variable that names no setting: pydantic-settings reads
    only the names it knows, so a misspelt one (`SLAGUARD_SERVE_PROT=9000`) was ignored,
    and a misspelt nested one was reported as the file's key. Names are case-insensitive,
    as pydantic-settings reads them."""
    for name in sorted(env):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX):
            continue
        loc = tuple(part.lower() for part in upper.removeprefix(ENV_PREFIX).split("__"))
        section: type[BaseModel] | None = ServiceConfig
        for depth, part in enumerate(loc):
            if section is None:  # `SLAGUARD_SERVE_PORT__HTTP`: port has no keys
                known = "__".join(loc[:depth]).upper()
                raise ServiceConfigError(
                    f"${name}: {'.'.join(loc)}: unknown setting; fix: unset it: "
                    f"{'.'.join(loc[:depth])} is a single value, not a section (set "
                    f"${ENV_PREFIX}{known})"
                )
            if part not in section.model_fields:
                raise ServiceConfigError(
                    f"${name}: {_field_path(loc[: depth + 1])}: unknown setting; fix: "
                    f"{_unknown_key_fix(loc[: depth + 1], variable=True)}"
                )
            field = section.model_fields[part]
            if depth == len(loc) - 1 and (line := not_json(name, ".".join(loc), field, env[name])):
                raise ServiceConfigError(line)
            inner = field.annotation
            section = inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _variable_of(loc: tuple[int | str, ...], env_set: set[str]) -> str | None:
    """The variable that gave the value at `loc`: its own (`..._GATEWAY__ENABLED`) or a
    section's holding it as JSON (`SLAGUARD_SERVE_GATEWAY='{"enabled": false}'`)."""
    keys = [p.upper() for p in loc if isinstance(p, str)]  # no items
    for depth in range(len(keys), 0, -1):
        name = ENV_PREFIX + "__".join(keys[:depth])
        if name in env_set:
            return name
    return None


def _db_source(file_source: str, flags: Mapping[str, Any]) -> str:
    """Where `db` came from, for its errors (a URL from the file was named `--db`); with
    none of these, `resolve_db_url` names `$SLAGUARD_DB` itself."""
    if "db" in flags:
        return "--db"
    if f"{ENV_PREFIX}DB" in {k.upper() for k in os.environ}:
        return f"${ENV_PREFIX}DB"
    return f"{file_source}: db"


def _config_error(err: Any, file_source: str, flags: Mapping[str, Any]) -> str:
    """One line naming where the bad value came from (flag, environment variable or
    file), the field, and the fix."""
    loc: tuple[int | str, ...] = err["loc"]
    field = _field_path(loc)
    value = err.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict | list) else ""
    env_name = ENV_PREFIX + "__".join(p.upper() for p in loc if isinstance(p, str))  # no items
    env_set = {k.upper() for k in os.environ}
    variable = _variable_of(loc, env_set)
    top = str(loc[0]) if loc else ""
    flag = f"--{top.replace('_', '-')}" if top in flags and not isinstance(flags[top], dict) else ""
    if err["type"] == "extra_forbidden":  # an unknown variable name is refused before
        if variable is not None:  # a key of a section given as JSON
            return f"${variable}: {field}: unknown setting; fix: " + _unknown_key_fix(
                loc, variable=True
            )
        return f"{file_source}: {field}: unknown setting; fix: {_unknown_key_fix(loc)}"
    if err["type"] == "value_error":  # a check of ours: its message names the fix
        if flag:
            return f"{flag}: {err['ctx']['error']}"
        where = f"${variable}" if variable is not None else file_source
        return f"{where}: {field}: {err['ctx']['error']}"
    if flag:
        return f"{flag}: {err['msg']}{shown}; fix: pass a valid value"
    if variable is not None:
        fix = _VARIABLE_FIXES.get(err["type"], "correct the variable or unset it")
        where = f"${variable}"
    else:
        what = _TYPE_FIXES.get(err["type"], "correct the value")
        where, fix = file_source, f"{what} (or set ${env_name})"
    return f"{where}: {field}: {err['msg']}{shown}; fix: {fix}"


_TYPE_FIXES = {  # the file's values of the wrong kind (flags, counts and numbers are strict)
    "int_type": "write a whole number, like 3, without quotes",
    "bool_type": "write true or false, without quotes",
    "number_type": "write a number",
    "finite_number": "write a finite number",
}


_VARIABLE_FIXES = {
    "bool_type": "set it to true or false, or unset it",
    "int_type": "set it to a whole number in digits, like 3, or unset it",
}


def _unknown_key_fix(loc: tuple[int | str, ...], *, variable: bool = False) -> str:
    """Remove it (unset the `variable`), or the keys of its section (did you mean ...?,
    as the variable to set), and where they are documented: guard keys in docs/guard.md,
    not examples/serve.yaml."""
    drop = "unset it" if variable else "remove it"
    if loc == ("admin_token",):
        return f"{drop}; the admin token is read only from ${ADMIN_TOKEN_ENV}(_FILE)"
    section: type[BaseModel] = ServiceConfig
    for part in loc[:-1]:
        inner = section.model_fields[str(part)].annotation
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            break
        section = inner
    keys = sorted(set(section.model_fields) - {"evaluation_interval_s"})  # serve refuses it
    doc = "docs/guard.md" if loc[0] == "guard" else "examples/serve.yaml"
    fix = f"{drop}, or use one of {', '.join(keys)} ({doc})"
    near = difflib.get_close_matches(str(loc[-1]), keys, n=1)
    if not near:
        return fix
    if variable:
        parts = [str(p).upper() for p in (*loc[:-1], near[0]) if isinstance(p, str)]
        return f"{fix}; did you mean ${ENV_PREFIX}{'__'.join(parts)}?"
    return f"{fix}; did you mean {near[0]!r}?"
