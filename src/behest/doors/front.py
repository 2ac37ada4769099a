"""The HTTP listener's front: the doors' paths, with CORS for the configured origins, and the
run inspector (web/) for everything else.

Door paths: `/agent.v1.*` (Connect and gRPC-Web, connect.py) and the routes the plain-HTTP
doors add (`/v1/…`, `/ag-ui`). A browser on an origin that is not configured gets no CORS
headers (and a preflight is refused), so its page cannot read a door's answers.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from behest.doors.connect import ConnectDoor

# What browsers may send and read across origins: Connect's, gRPC-Web's and SSE's headers.
ALLOWED_HEADERS = (
    "authorization",
    "content-type",
    "connect-protocol-version",
    "connect-timeout-ms",
    "connect-content-encoding",
    "connect-accept-encoding",
    "grpc-timeout",
    "x-grpc-web",
    "x-user-agent",
    "last-event-id",
    "traceparent",
)
EXPOSED_HEADERS = (
    "grpc-status",
    "grpc-message",
    "grpc-status-details-bin",
    "connect-content-encoding",
    "connect-accept-encoding",
    "content-encoding",
)
PLAIN_PREFIXES = ("/v1/", "/ag-ui")


class Front:
    """Routes a request to a door (through CORS) or to the inspector."""

    def __init__(
        self,
        inspector: ASGIApp,
        connect: ConnectDoor,
        routes: Sequence[BaseRoute],
        *,
        cors_origins: Sequence[str],
    ) -> None:
        self._inspector = inspector
        self._connect = connect
        self._plain = Router(routes=list(routes))
        self._doors = _Cors(
            self._door,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            max_age=600,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/agent.v1.") or path.startswith(PLAIN_PREFIXES):
            await self._doors(scope, receive, send)
        else:
            await self._inspector(scope, receive, send)

    async def _door(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"].startswith("/agent.v1."):
            await self._connect(scope, receive, send)
        else:
            await self._plain(scope, receive, send)


class _Cors(CORSMiddleware):
    """Starlette's CORS, except that a request from an origin that is not allowed gets no CORS
    header at all (Starlette's gives it Access-Control-Expose-Headers, and a refused preflight
    its Allow-Methods and Allow-Headers): such a page learns nothing of what the doors allow."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is None or self.is_allowed_origin(origin):
            await super().__call__(scope, receive, send)
        elif scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await PlainTextResponse("Disallowed CORS origin", status_code=400)(scope, receive, send)
        else:
            await self.app(scope, receive, send)
