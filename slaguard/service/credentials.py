"""The service's credentials from the environment: the admin token and the key sent to the
backends, each from `$NAME` or the file `$NAME_FILE` names (never both)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import SecretStr

from slaguard.notify.factory import both_secret_sources, read_secret_file
from slaguard.service.config import ADMIN_TOKEN_ENV, ServiceConfigError

BACKEND_KEY_ENV = "SLAGUARD_BACKEND_API_KEY"


def admin_token(env: Mapping[str, str] | None = None) -> SecretStr | None:
    """The admin bearer token from the environment; None disables the admin endpoints."""
    value = _env_secret(
        os.environ if env is None else env,
        ADMIN_TOKEN_ENV,
        what="token",
        fix="a long random token (e.g. `openssl rand -hex 32`)",
        unset="to leave the admin endpoints disabled",
    )
    if value and len(value) < 16:
        raise ServiceConfigError(
            f"{ADMIN_TOKEN_ENV}: token shorter than 16 characters; fix: use a long random "
            "token (e.g. `openssl rand -hex 32`)"
        )
    return SecretStr(value) if value else None


def backend_api_key(env: Mapping[str, str] | None = None) -> SecretStr | None:
    """The key the gateway and the scraper send the backends as a bearer token (vLLM's
    `--api-key`, an authenticating proxy); None sends none. Its length is the backends'
    choice, not ours."""
    value = _env_secret(
        os.environ if env is None else env,
        BACKEND_KEY_ENV,
        what="key",
        fix="the API key the backends expect",
        unset="to send the backends no credentials",
    )
    return SecretStr(value) if value else None


def _env_secret(env: Mapping[str, str], name: str, *, what: str, fix: str, unset: str) -> str:
    """`$name` or the content of the file `$name_FILE` names (never both); "" if neither.
    Set but blank, or an empty file, is refused rather than taken as unset; so is a secret
    an HTTP header cannot carry (a client sends it as latin-1 bytes, or refuses to)."""
    value = env.get(name, "").strip()
    if name in env and not value:
        raise ServiceConfigError(f"{name}: set but blank; fix: set {fix}, or unset it {unset}")
    file_var = f"{name}_FILE"
    if file_var in env:
        file_name = env[file_var].strip()
        if not file_name:
            raise ServiceConfigError(
                f"{file_var}: set but blank; fix: name the file holding the {what}, or unset "
                f"it {unset}"
            )
        if value:
            raise ServiceConfigError(both_secret_sources(name, file_var, file_name))
        value = read_secret_file(file_var, file_name, ServiceConfigError)
        if not value:
            raise ServiceConfigError(
                f"{file_var}: {file_name} is empty; fix: write the {what} in it"
            )
    if value and not all("!" <= ch <= "~" for ch in value):
        raise ServiceConfigError(
            f"{name}: the {what} must be printable ASCII (no spaces); fix: use {fix}"
        )
    return value
