"""Checks and settings shared by the commands that run an HTTP server."""

from __future__ import annotations

import errno
import socket
from typing import Any

from slaguard.cli.errors import fail

UNPRIVILEGED_PORTS_FROM = 1024
"""Ports below this need root or CAP_NET_BIND_SERVICE (Linux's default
`net.ipv4.ip_unprivileged_port_start`)."""

SERVER_SETTINGS: dict[str, Any] = {
    "loop": "uvloop",
    "http": "httptools",
    "access_log": False,
    "proxy_headers": False,
    "server_header": False,
    "timeout_graceful_shutdown": 20,
}
"""uvicorn for an API answered in well under a millisecond of CPU: uvloop and httptools
(h11 cost ~2x the CPU per request on the 2-core box), no access log line per request,
no X-Forwarded-For rewriting (nothing reads the client address) and no `server` header:
each of the last two is a few us per request. A stop waits at most 20 s for the answers
in flight (a long stream is cut and recorded as failed), inside Kubernetes' default 30 s
grace period."""


def check_can_listen(host: str, port: int, *, port_fix: str, host_fix: str) -> None:
    """Refuse a taken, privileged or unusable address in one line before any work starts
    (uvicorn would find out only after the app was built). `port_fix` / `host_fix` name
    where the value came from (`--port`, `$SLAGUARD_SERVE_HOST`, `serve.yaml: host`)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        problem, fix = f"{exc.strerror or exc}", f"use an address of this machine ({host_fix})"
        if exc.errno == errno.EADDRINUSE:
            fix = f"pick a free port ({port_fix}) or stop what listens there"
        elif exc.errno == errno.EACCES:  # not the address: the port is reserved to root
            problem += f" (port {port} needs privileges: root or CAP_NET_BIND_SERVICE)"
            fix = f"use a port of {UNPRIVILEGED_PORTS_FROM} or above ({port_fix})"
        fail(f"cannot listen on {host}:{port}: {problem}; fix: {fix}")
