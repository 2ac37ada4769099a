"""The inspector's HTTP side: the Starlette app (routes, error pages, security headers) and
the uvicorn server it runs on, in the gRPC server's event loop (`App.start`/`App.stop`).

Served over HTTPS with the gRPC port's certificate and key when `[tls]` is set. Every response
carries a Content-Security-Policy that allows scripts, styles and images from behest only (no
inline script, no CDN), and pages are never cached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from behest.api.answers import MAX_RESULT_BYTES
from behest.api.auth import Authenticator
from behest.config import AuthSettings, TlsSettings
from behest.errors import (
    BehestError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
)
from behest.runs.operations import Operations
from behest.web.actions import Actions
from behest.web.agent_pages import AgentPages
from behest.web.auth import CsrfRefused, Gate, SignInRequired
from behest.web.live import LiveTails
from behest.web.pages import Pages
from behest.web.rendering import Renderer
from behest.web.session_live import SessionTails
from behest.web.session_page import SessionPage
from behest.web.wrong_port import http1_or_grpc

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-opener-policy": "same-origin",
}
_STATUS = {
    NotFound: 404,
    PermissionDenied: 403,
    InvalidArgument: 400,
    OutOfRange: 400,
    FailedPrecondition: 409,
}


def build_app(
    runs: Operations, gate: Gate, live: LiveTails, open_streams: Callable[[str], int]
) -> Starlette:
    renderer = Renderer(gate)
    pages = Pages(runs, gate, renderer, live, open_streams)
    actions = Actions(runs, gate, pages)
    agents = AgentPages(runs, gate, renderer)
    session = SessionPage(runs, gate, renderer)
    session_live = SessionTails(runs, gate, live)
    routes = [
        Route("/", _home),
        Route("/signin", pages.sign_in, methods=["GET"]),
        Route("/signin", actions.sign_in, methods=["POST"]),
        Route("/signout", actions.sign_out, methods=["POST"]),
        Route("/runs", pages.runs),
        Route("/runs/{run_id:uuid}", pages.run),
        Route("/runs/{run_id:uuid}/live", live.endpoint),
        Route("/runs/{run_id:uuid}/cancel", actions.cancel, methods=["POST"]),
        Route("/runs/{run_id:uuid}/answer", actions.answer, methods=["POST"]),
        Route("/approvals", pages.approvals),
        Route("/sessions", pages.sessions),
        Route("/sessions/{session_id:uuid}", session.page),
        Route("/sessions/{session_id:uuid}/live", session_live.endpoint),
        Route("/agents", agents.agents),
        Route("/agents/{name}", agents.agent),
        Route("/dashboard", pages.dashboard),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    errors = _ErrorPages(renderer, gate)
    return Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={
            SignInRequired: errors.sign_in_required,
            CsrfRefused: errors.csrf_refused,
            BehestError: errors.refused,
            HTTPException: errors.http,
        },
        max_body_size=2 * MAX_RESULT_BYTES,
    )


async def _home(request: Request) -> Response:
    return RedirectResponse("/runs", status_code=303)


class _ErrorPages:
    """Error pages. A run, session or agent of another tenant is the same 404 as a missing
    one."""

    def __init__(self, renderer: Renderer, gate: Gate) -> None:
        self._render = renderer
        self._gate = gate

    async def sign_in_required(self, request: Request, exc: Exception) -> Response:
        if request.url.path.endswith("/live"):
            return PlainTextResponse("sign in first", status_code=401)
        return RedirectResponse("/signin", status_code=303)

    async def csrf_refused(self, request: Request, exc: Exception) -> Response:
        message = "The form's CSRF token is missing or not this sign-in's: nothing was done."
        return self._page(request, 403, "Refused", message)

    async def refused(self, request: Request, exc: Exception) -> Response:
        status = next((code for cls, code in _STATUS.items() if isinstance(exc, cls)), 500)
        if status == 404:
            return self._page(request, 404, "Not found", "There is no such run, session or agent.")
        if status == 500:
            log.error("inspector: %s", type(exc).__name__, exc_info=exc)
            return self._page(request, 500, "Error", "Something went wrong; it is logged.")
        return self._page(request, status, "Refused", str(exc))

    async def http(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return self._page(request, 404, "Not found", "There is no such run, session or agent.")
        return PlainTextResponse(str(exc.detail), status_code=exc.status_code)

    def _page(self, request: Request, status: int, title: str, message: str) -> Response:
        try:
            caller = self._gate.caller(request)
        except SignInRequired:
            caller = None
        return self._render.page(
            request, "error.html", caller=caller, status=status, title=title, message=message
        )


class SecurityHeaders:
    """Adds the CSP and its companions to every response; no caching but of static files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith("/static/")
        https = scope.get("scheme") == "https"

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers[name] = value
                headers["cache-control"] = "public, max-age=300" if static else "no-store"
                if https:
                    headers["strict-transport-security"] = "max-age=31536000"
            await send(message)

        await self.app(scope, receive, sending)


class WebServer:
    """The HTTP listener on `listen` (host:port; port 0 picks one): the inspector, behind
    the HTTP doors; started and stopped by App."""

    def __init__(
        self,
        runs: Operations,
        *,
        listen: str,
        auth: AuthSettings,
        tls: TlsSettings,
        open_streams: Callable[[str], int] = lambda tenant: 0,
        front: Callable[[ASGIApp], ASGIApp] = lambda inspector: inspector,
        grpc_port: Callable[[], int] = lambda: 0,
    ) -> None:
        """`open_streams`: a tenant's gRPC streams open now (the API's admission counts);
        `front`: what answers before the inspector (the HTTP doors, doors/front.py);
        `grpc_port`: the port a gRPC client that calls this one is told of (wrong_port.py)."""
        self.gate = Gate(Authenticator(auth, tls))
        self.live = LiveTails(runs, self.gate)
        host, _, port = listen.rpartition(":")
        config = uvicorn.Config(
            front(build_app(runs, self.gate, self.live, open_streams)),
            host=host.strip("[]"),
            port=int(port),
            http=http1_or_grpc(grpc_port),
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            ssl_certfile=tls.cert_file or None,
            ssl_keyfile=tls.key_file or None,
            timeout_graceful_shutdown=1,
        )
        self.listen = listen
        self.scheme = "https" if tls.enabled else "http"
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen (raises FailedPrecondition if it cannot), then serve in a task. uvicorn's
        `serve()` would take SIGINT and SIGTERM from behest; its parts are used instead."""
        server = self._server
        server.config.load()
        server.lifespan = server.config.lifespan_class(server.config)
        try:
            await server.startup()
        except SystemExit:  # uvicorn's way to say it could not bind
            raise FailedPrecondition(f"http_listen {self.listen!r}: cannot listen there") from None
        self._task = asyncio.create_task(self._serve())

    async def _serve(self) -> None:
        await self._server.main_loop()
        await self._server.shutdown()

    async def stop(self) -> None:
        """Close the live tails, then the server (a second at most for requests in flight)."""
        self.live.close_all()
        if self._task is not None:
            self._server.should_exit = True
            await self._task
