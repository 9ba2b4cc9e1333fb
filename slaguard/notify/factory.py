"""Pick a notifier from the environment; secrets only from env vars or secrets files.

| variable | meaning |
|---|---|
| `SLAGUARD_SLACK_BOT_TOKEN` / `..._FILE` | bot token (Web API), with `SLAGUARD_SLACK_CHANNEL` |
| `SLAGUARD_SLACK_WEBHOOK_URL` / `..._FILE` | incoming webhook URL (a secret too) |
| `SLAGUARD_SLACK_BASE_URL` | Web API base URL (tests, proxies) |
| `SLAGUARD_NOTIFY_FILE` | append message JSON lines to this file |
| `SLAGUARD_DASHBOARD_URL`, `SLAGUARD_RUNBOOK_URL` | links in every message |

First match wins in that order; with nothing set, messages go to the console (`serve`
logs the choice at INFO). A variable set but blank is refused: a blank token silently sent
every message to the console. A secret never appears in an error message, a log line or a
repr. A secret is refused at start when it has whitespace or a control character inside (a
second line in its file): slack-sdk failed on it at every delivery, quoting it in the error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from pydantic import SecretStr

from slaguard.notify.base import Notifier
from slaguard.notify.console import ConsoleNotifier
from slaguard.notify.file import FileNotifier
from slaguard.notify.messaging import MessageLinks
from slaguard.notify.slack_web import SlackWebNotifier
from slaguard.notify.slack_webhook import SlackWebhookNotifier
from slaguard.userfiles import read_user_text

PREFIX = "SLAGUARD_"
SECRET_MAX_BYTES = 64 * 1024
"""A token or a webhook URL is well under a kilobyte; a bigger file is the wrong file."""


class NotifyConfigError(ValueError):
    """A one-line configuration mistake naming the variable (never its secret value)."""


def _set(env: Mapping[str, str], name: str) -> str | None:
    """`name`'s value without surrounding whitespace, None when unset; set but blank is
    refused (a blank `SLAGUARD_SLACK_BOT_TOKEN` sent every message to the console)."""
    if name not in env:
        return None
    value = env[name].strip()
    if not value:
        raise NotifyConfigError(f"{name}: set but blank; fix: give it its value, or unset it")
    return value


def read_secret_file(variable: str, file_name: str, error: type[Exception]) -> str:
    """The text of the secrets file `$variable` names, surrounding whitespace dropped.
    A FIFO hung the start, /dev/zero ran out of memory and a file that is not UTF-8 was
    a traceback: each is one `error` line naming the variable and the file, never the
    content."""
    path = Path(file_name)
    with contextlib.suppress(OSError):  # a missing file: read_user_text says so
        if path.stat().st_size > SECRET_MAX_BYTES:
            raise error(
                f"{variable}: {path}: larger than {SECRET_MAX_BYTES >> 10} KB, not a secret; "
                "fix: point it at the file holding only the secret"
            )
    try:
        return read_user_text(path, error, "secrets file").strip()
    except error as exc:
        raise error(f"{variable}: {exc}") from None


def both_secret_sources(name: str, file_var: str, file_name: str) -> str:
    """The refusal when a secret is set twice: the variable won and the file was ignored,
    so a token rotated in a mounted file went unused while an old one stayed in force."""
    return (
        f"{name}: set, and so is {file_var}: only one of them may hold the secret; fix: "
        f"unset {name} to read {file_name}, or unset {file_var}"
    )


def _secret(env: Mapping[str, str], name: str, what: str) -> SecretStr | None:
    """`NAME` from the environment or the contents of the file named by `NAME_FILE` (not both)
    (surrounding whitespace, such as the file's last newline, dropped)."""
    value = _set(env, name)
    file_name = _set(env, f"{name}_FILE")
    if value is not None and file_name is not None:
        raise NotifyConfigError(both_secret_sources(name, f"{name}_FILE", file_name))
    if value is not None:
        return _one_word(value, name, what)
    if file_name is None:
        return None
    content = read_secret_file(f"{name}_FILE", file_name, NotifyConfigError)
    if not content:
        raise NotifyConfigError(
            f"{name}_FILE: {file_name} is empty; fix: put the secret in the file"
        )
    return _one_word(content, f"{name}_FILE: {file_name}", what)


def _one_word(value: str, source: str, what: str) -> SecretStr:
    """The secret, if it is printable ASCII without spaces (it goes into an HTTP header or
    a URL); the error names `source`, never the value."""
    if not all("!" <= ch <= "~" for ch in value):
        raise NotifyConfigError(
            f"{source}: the {what} has whitespace, control or non-ASCII characters inside "
            f"(a second line?); fix: keep only the {what} itself"
        )
    return SecretStr(value)


def links_from_env(env: Mapping[str, str]) -> MessageLinks:
    """Dashboard and runbook links, defaults when unset."""
    default = MessageLinks()
    return MessageLinks(
        dashboard_url=env.get(f"{PREFIX}DASHBOARD_URL", default.dashboard_url),
        runbook_url=env.get(f"{PREFIX}RUNBOOK_URL", default.runbook_url),
    )


def notifier_from_env(
    env: Mapping[str, str] | None = None,
    notify_file: Path | None = None,
    guard_db_url: str | None = None,
) -> Notifier:
    """The notifier the environment asks for (see the module table); `notify_file` (the
    service's config) comes before all of it. The links come from the environment;
    `guard_db_url` (the guard's database) goes into each message's resume command."""
    return choose_notifier(env, notify_file, guard_db_url)[0]


def choose_notifier(
    env: Mapping[str, str] | None = None,
    notify_file: Path | None = None,
    guard_db_url: str | None = None,
) -> tuple[Notifier, str]:
    """`notifier_from_env`'s notifier and where it sends, in words without any secret (for
    the service's start log: a console notifier picked by mistake went unnoticed)."""
    env = os.environ if env is None else env
    links = replace(links_from_env(env), guard_db_url=guard_db_url)
    if notify_file is not None:
        return _file_notifier(notify_file, "notify_file", links), f"the file {notify_file}"
    token = _secret(env, f"{PREFIX}SLACK_BOT_TOKEN", "token")
    if token is not None:
        channel = env.get(f"{PREFIX}SLACK_CHANNEL", "").strip()
        if not channel:
            raise NotifyConfigError(
                f"{PREFIX}SLACK_CHANNEL: missing; fix: set it to the channel id (e.g. "
                f"C0123456) when {PREFIX}SLACK_BOT_TOKEN is set"
            )
        base_url = _set(env, f"{PREFIX}SLACK_BASE_URL")
        if base_url is not None and not _http_url(base_url):
            raise NotifyConfigError(
                f"{PREFIX}SLACK_BASE_URL: {base_url!r} is not an http(s) URL; fix: write it "
                "like https://slack.com/api/ (or unset it)"
            )
        notifier = SlackWebNotifier(token, channel, links, base_url=base_url)
        return notifier, f"Slack channel {channel} (bot token)"
    webhook = _secret(env, f"{PREFIX}SLACK_WEBHOOK_URL", "URL")
    if webhook is not None:
        if not _http_url(webhook.get_secret_value()):
            raise NotifyConfigError(
                f"{PREFIX}SLACK_WEBHOOK_URL: not an http(s) URL; "
                "fix: paste the webhook URL Slack gave you"
            )
        return SlackWebhookNotifier(webhook, links), "a Slack incoming webhook"
    path = _set(env, f"{PREFIX}NOTIFY_FILE")
    if path is not None:
        return _file_notifier(Path(path), f"{PREFIX}NOTIFY_FILE", links), f"the file {path}"
    if _set(env, f"{PREFIX}SLACK_CHANNEL") is not None:  # a token that did not arrive
        raise NotifyConfigError(
            f"{PREFIX}SLACK_CHANNEL: set, but no {PREFIX}SLACK_BOT_TOKEN (or _FILE) to post "
            f"with; fix: set the bot token, or unset {PREFIX}SLACK_CHANNEL to log incidents "
            "to the console"
        )
    return ConsoleNotifier(links), (
        f"the console (stdout): no {PREFIX}SLACK_BOT_TOKEN, {PREFIX}SLACK_WEBHOOK_URL or "
        f"{PREFIX}NOTIFY_FILE set"
    )


def _http_url(url: str) -> bool:
    """An http(s) URL with no whitespace or control characters (urllib refuses those at
    each request, quoting the URL)."""
    return url.startswith(("https://", "http://")) and all("!" <= ch <= "~" for ch in url)


def _file_notifier(path: Path, source: str, links: MessageLinks) -> FileNotifier:
    """A file notifier whose file can be appended to (found at start, not at the first
    incident, whose message would then be retried for ever)."""
    if path.is_dir():
        raise NotifyConfigError(f"{source}: {path} is a directory; fix: name a file")
    if not path.parent.is_dir():
        raise NotifyConfigError(
            f"{source}: directory {path.parent} does not exist; fix: create it or name another file"
        )
    if not os.access(path if path.exists() else path.parent, os.W_OK):
        raise NotifyConfigError(f"{source}: cannot write {path}; fix: name a writable file")
    return FileNotifier(path, links)
