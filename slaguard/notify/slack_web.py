"""Slack Web API notifier: `chat.postMessage` with a bot token, updates in the thread.

The incident's first message is the thread root; updates and the resolution are replies
(`thread_ts`), the resolution also broadcast to the channel. `threads` maps incident id to
root `ts`; pass a persistent mapping to keep threads across restarts.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from pydantic import SecretStr
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from slaguard.guard.events import IncidentEvent, IncidentState
from slaguard.notify.base import DeliveryResult, retryable_status
from slaguard.notify.messaging import MessageLinks, build_message
from slaguard.notify.redact import Redactor, failed, redacting_logger
from slaguard.notify.retry import retry_after_s, slack_retry_handlers


class SlackWebNotifier:
    """Posts incident messages to one channel with a bot token."""

    name = "slack_web"

    def __init__(
        self,
        token: SecretStr,
        channel: str,
        links: MessageLinks | None = None,
        base_url: str | None = None,
        threads: MutableMapping[str, str] | None = None,
        max_retries: int = 1,
        server_backoff_s: float = 0.5,
        timeout_s: int = 10,
    ) -> None:
        self.channel = channel
        self.links = links or MessageLinks()
        self.threads: MutableMapping[str, str] = threads if threads is not None else {}
        self._redact = Redactor(token.get_secret_value())
        self._client = WebClient(
            token=token.get_secret_value(),
            # slack-sdk drops the last path segment of a base URL without a trailing slash
            base_url=(base_url.rstrip("/") + "/") if base_url else WebClient.BASE_URL,
            timeout=timeout_s,
            retry_handlers=slack_retry_handlers(max_retries, server_backoff_s),
            logger=redacting_logger(self.name, self._redact),
        )

    def __repr__(self) -> str:
        return f"SlackWebNotifier(channel={self.channel!r}, token=**********)"

    def send(self, event: IncidentEvent) -> DeliveryResult:
        """Post the message (a thread reply unless it opens the incident); every error is a
        failed result, never an exception."""
        message = build_message(event, self.links)
        thread_ts = (
            None if event.state is IncidentState.OPENED else self.threads.get(event.incident_id)
        )
        try:
            response = self._client.chat_postMessage(
                channel=self.channel,
                text=message.text,
                blocks=message.blocks,
                thread_ts=thread_ts,
                reply_broadcast=True
                if thread_ts and event.state is IncidentState.RESOLVED
                else None,
                unfurl_links=False,
            )
        except SlackApiError as exc:
            status = exc.response.status_code
            error = exc.response.get("error", "") if isinstance(exc.response.data, dict) else ""
            return DeliveryResult(
                False,
                f"chat.postMessage failed: HTTP {status} {error}".strip(),
                retryable=retryable_status(status),
                status_code=status,
                retry_after_s=retry_after_s(exc.response.headers),
            )
        except Exception as exc:
            return failed("chat.postMessage", exc, self._redact)
        ts = str(response.get("ts", ""))
        if thread_ts is None and ts:
            self.threads[event.incident_id] = ts
        return DeliveryResult(
            True, "posted", status_code=response.status_code, thread_ts=thread_ts or ts
        )
