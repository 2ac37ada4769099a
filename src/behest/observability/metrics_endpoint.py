"""The Prometheus scrape endpoint (`metrics_listen`): /metrics served from a thread, guarded
like the gRPC port.

- `[tls]` set: HTTPS with the server's certificate; with `[auth] mode = "mtls"` a scrape needs
  a client certificate the client CA signed.
- `[auth] mode = "bearer"`: a scrape sends `Authorization: Bearer <token>` (Prometheus:
  `authorization: {credentials_file: …}`) of a caller with the role `[auth] metrics_role`
  (default "metrics"; empty: any caller). 401 without a valid token, 403 without the role.
- `[auth] mode = "none"`: open (and, as the other ports, only on loopback unless
  allow_insecure).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

# The Authorization header's value → None to let the scrape in, else (status, why not).
Guard = Callable[[str], tuple[int, str] | None]
_REASONS = {401: "401 Unauthorized", 403: "403 Forbidden"}


@dataclass(frozen=True, slots=True)
class Security:
    """How the endpoint is protected (all unset: plain HTTP, open)."""

    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""  # a client certificate it signed is required
    guard: Guard | None = None


def serve(
    registry: CollectorRegistry, host: str, port: int, security: Security
) -> tuple[WSGIServer, threading.Thread]:
    """Start serving `registry` on host:port in a daemon thread."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    app = make_wsgi_app(registry)
    if security.guard is not None:
        app = _guarded(app, security.guard)
    server = make_server(str(address[0]), port, app, Server, handler_class=_Quiet)
    if security.cert_file:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(security.cert_file, security.key_file)
        if security.client_ca_file:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(security.client_ca_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="behest-metrics", daemon=True)
    thread.start()
    return server, thread


def _guarded(app: Any, guard: Guard) -> Any:
    def guarded(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        refused = guard(environ.get("HTTP_AUTHORIZATION", ""))
        if refused is None:
            return app(environ, start_response)  # type: ignore[no-any-return]
        status, why = refused
        headers = [("Content-Type", "text/plain; charset=utf-8")]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="behest metrics"'))
        start_response(_REASONS[status], headers)
        return [why.encode() + b"\n"]

    return guarded


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""
