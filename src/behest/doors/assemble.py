"""The HTTP doors built from the settings, as the front of the HTTP listener (web/app.py
`WebServer(front=…)`): one Authenticator, the API server's own guarded methods."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from behest.api.auth import Authenticator
from behest.api.handlers import GuardedMethod
from behest.config import Settings
from behest.doors.agui import AguiDoor
from behest.doors.connect import ConnectDoor
from behest.doors.front import Front
from behest.doors.sse import ServerSentEvents
from behest.runs.operations import Operations


def doors_front(
    services: Mapping[str, list[GuardedMethod]], settings: Settings, runs: Operations
) -> Callable[[ASGIApp], ASGIApp]:
    """What puts the doors in front of the inspector's app."""
    authenticator = Authenticator(settings.auth, settings.tls)
    max_body = settings.max_receive_message_bytes
    connect = ConnectDoor(services, authenticator, read_max_bytes=max_body)
    # The plain-HTTP doors' routes (server-sent events, AG-UI) join here.
    routes: list[BaseRoute] = [*ServerSentEvents.of(services, authenticator, runs, settings).routes]
    heartbeat_s = settings.sse_heartbeat_s
    agui = AguiDoor(services, authenticator, max_body_bytes=max_body, heartbeat_s=heartbeat_s)
    routes += agui.routes()

    def front(inspector: ASGIApp) -> ASGIApp:
        return Front(inspector, connect, routes, cors_origins=settings.http_cors_origins)

    return front
