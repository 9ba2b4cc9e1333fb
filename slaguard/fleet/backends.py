"""Each target's `url` is a backend of its own: the scraper reads that backend's load into
the target and the router counts its capacity, so one backend under two targets was
counted twice without a word. Nor does a url carry credentials: clients are shown it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

REPLICA_NUMBER = "{i}"
"""In a `url` with `count` above 1, replaced by each replica's number (0, 1, ...)."""


class _Spec(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def url(self) -> str | None: ...


def replica_url(url: str | None, count: int, k: int) -> str | None:
    """The url of replica `k` of a target written with `count` replicas."""
    return url.replace(REPLICA_NUMBER, str(k)) if url is not None and count > 1 else url


def credentials_in_url(specs: Sequence[_Spec]) -> tuple[int, str, str] | None:
    """(target index, problem, fix) for the first url holding a user name or password:
    `/v1/route` answers each client its target's url and `/v1/status` shows them all, so a
    password there reached every caller. Neither is quoted back."""
    for i, spec in enumerate(specs):
        if spec.url is not None and "@" in urlsplit(spec.url).netloc:
            return (
                i,
                f"the url of {spec.id!r} holds a user name or password, which /v1/route and "
                "/v1/status show every caller",
                "remove them from the url; for a backend that needs a key, set "
                "$SLAGUARD_BACKEND_API_KEY (sent as a bearer token)",
            )
    return None


def shared_backend(specs: Sequence[_Spec]) -> tuple[int, str, str] | None:
    """(target index, problem, fix) for the first url that is not a backend of its own."""
    owner: dict[str, str] = {}
    for i, spec in enumerate(specs):
        if spec.url is None:
            continue
        if spec.count == 1 and REPLICA_NUMBER in spec.url:
            return (
                i,
                f"{REPLICA_NUMBER} stands for the replica's number, but {spec.id!r} has count "
                "1, so it would stay in the address as written",
                f"write the backend's url without {REPLICA_NUMBER}",
            )
        if spec.count > 1 and REPLICA_NUMBER not in spec.url:
            return (
                i,
                f"the {spec.count} replicas of {spec.id!r} (count: {spec.count}) all get "
                f"{spec.url}, one backend the router would count {spec.count} times",
                f"put {REPLICA_NUMBER} in the url where each replica's number goes "
                f"({spec.id}-0 gets 0, {spec.id}-1 gets 1), or list each replica as a target "
                "with its own url",
            )
        for k in range(spec.count):
            url = spec.url.replace(REPLICA_NUMBER, str(k)) if spec.count > 1 else spec.url
            key = url.rstrip("/")
            if key in owner:
                return (
                    i,
                    f"{url} is already the backend of target {owner[key]!r}",
                    "give each target the url of its own backend",
                )
            owner[key] = spec.id if spec.count == 1 else f"{spec.id}-{k}"
    return None
