"""The gateway's request to a backend: its headers, slaguard's credentials, and which
statuses count as the backend failing before the first byte.

With `$SLAGUARD_BACKEND_API_KEY` (or `..._FILE`) set, every request to a backend (the
gateway's and the scraper's) carries `Authorization: Bearer <key>`: vLLM started with
`--api-key`, or a backend behind an authenticating proxy, answers 401 without it. The
client's own headers are never forwarded, so a 401 or 403 from a backend is about
slaguard's credentials, not the client's: it is still relayed as the backend's answer, and
logged at WARNING once a minute per target, naming the variable to set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
from pydantic import SecretStr

from slaguard.fleet import Target
from slaguard.service.config_sections import GatewayConfig
from slaguard.service.credentials import BACKEND_KEY_ENV

log = logging.getLogger(__name__)

FORWARD_HEADERS = {"content-type": "application/json", "accept-encoding": "identity"}
"""Asked of the backend: identity, since its bytes are relayed without its headers."""
REFUSALS = (401, 403)
WARN_EVERY_S = 60.0


class UpstreamError(Exception):
    """The backend failed before the first byte of its answer."""


@dataclass(slots=True)
class Upstream:
    """An answer whose first bytes arrived: the response, those bytes, the rest to come."""

    response: aiohttp.ClientResponse
    first: bytes
    rest: AsyncIterator[bytes]


def refusal(status: int, keyed: bool) -> str:
    """What a 401 or 403 from a backend means; never the key itself."""
    sent = f"${BACKEND_KEY_ENV}" if keyed else "none sent"
    return f"HTTP {status}: the backend refused slaguard's credentials ({sent})"


def refusal_fix(keyed: bool) -> str:
    """The fix for a refusal: the key, or the right key."""
    if keyed:
        return "set it to the API key the backend expects"
    return f"set ${BACKEND_KEY_ENV} (or ${BACKEND_KEY_ENV}_FILE) to the backends' API key"


class BackendAccess:
    """slaguard's credentials for the backends, as the headers of its requests (`auth`
    alone, the scraper's; `forward`, the gateway's), and the warning when a backend
    refuses them."""

    def __init__(self, key: SecretStr | None) -> None:
        self.keyed = key is not None
        self.auth = {} if key is None else {"authorization": f"Bearer {key.get_secret_value()}"}
        self.forward = {**FORWARD_HEADERS, **self.auth}
        self._warned_s: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"BackendAccess(keyed={self.keyed})"

    def refused(self, target_id: str, status: int, now_s: float) -> None:
        """A backend answered 401 or 403: warn, at most once a minute per target."""
        last = self._warned_s.get(target_id)
        if last is not None and now_s - last < WARN_EVERY_S:
            return
        self._warned_s[target_id] = now_s
        log.warning(
            "gateway: target %s answered %s; the client got the backend's answer; fix: %s",
            target_id,
            refusal(status, self.keyed),
            refusal_fix(self.keyed),
        )


def why_failed(exc: Exception, stream: bool, g: GatewayConfig) -> str:
    """What an attempt's failure says; for a timeout (asyncio's says nothing) the limit
    and the setting it comes from."""
    if str(exc) or not isinstance(exc, TimeoutError):
        return str(exc) or type(exc).__name__
    if stream:
        limit = f"no first byte within {g.first_byte_timeout_s:g} s (gateway.first_byte_timeout_s)"
    else:
        limit = f"no answer within {g.read_timeout_s:g} s (gateway.read_timeout_s)"
    return f"TimeoutError: {limit}"


class AttemptFailures:
    """The warning for attempts that failed before the first byte, at most once a minute
    per target with the count since its last one: the retry hid them from the client, the
    audit note and the counter say which request and how many, but nothing in the log
    said which backend or why."""

    def __init__(self) -> None:
        self._warned_s: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def failed(self, target_id: str, why: str, retried: bool, now_s: float) -> None:
        self._since[target_id] = self._since.get(target_id, 0) + 1
        last = self._warned_s.get(target_id)
        if last is not None and now_s - last < WARN_EVERY_S:
            return
        count = self._since.pop(target_id)
        self._warned_s[target_id] = now_s
        log.warning(
            "gateway: target %s failed before the first byte (%s); %s%s",
            target_id,
            why,
            "retried on the next-best target" if retried else "no target left to retry on",
            "" if last is None else f"; {count} failures of it since the last such line",
        )


async def first_byte(
    client: aiohttp.ClientSession, target: Target, path: str, raw: bytes, access: BackendAccess
) -> Upstream:
    """Send the request; the first bytes of an answer that is not the backend failing."""
    if not target.url:
        raise UpstreamError("no URL configured for this target")
    resp = await client.post(
        target.url.rstrip("/") + path, data=raw, headers=access.forward, allow_redirects=False
    )
    try:
        if resp.status >= 500:
            raise UpstreamError(f"HTTP {resp.status}")
        if 300 <= resp.status < 400:  # followed, it sent the prompt to a host of its choosing
            where = resp.headers.get("location", "?")
            raise UpstreamError(
                f"HTTP {resp.status} to {where!r}: redirects are not followed; set the "
                "target's url to where it serves"
            )
        if resp.status == 404:  # the model was checked against the fleet: the target is wrong
            raise UpstreamError("HTTP 404: the backend does not serve this model; check its url")
        if resp.status == 405:  # not an OpenAI-style server there: the url is wrong
            raise UpstreamError("HTTP 405: the backend takes no POST on this path; check its url")
        if resp.status in REFUSALS:
            access.refused(target.id, resp.status, time.monotonic())
        chunks = resp.content.iter_any()
        first = b""
        async for chunk in chunks:
            if chunk:
                first = chunk
                break
        return Upstream(resp, first, chunks)
    except BaseException:
        resp.close()
        raise
