"""The grpc.aio server: the agent.v1 services, grpc.health.v1, reflection, stream cap."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2

from behest._proto.agent.v1 import (
    agent_pb2,
    catalog_pb2,
    execution_pb2,
    run_pb2,
    session_pb2,
    worker_pb2,
)
from behest.api.admission import Admission
from behest.api.agent_service import AgentServicer
from behest.api.auth import Authenticator, AuthInterceptor
from behest.api.catalog_service import ProviderServicer, ToolServicer
from behest.api.compaction_service import CompactionServicer
from behest.api.execution_service import ToolExecutionServicer
from behest.api.handlers import GuardedMethod, generic_handler, guarded_methods
from behest.api.health import SERVICE_NAME as HEALTH
from behest.api.health import HealthServicer, health_handler
from behest.api.reflection import reflection_handlers
from behest.api.run_service import RunServicer
from behest.api.session_service import SessionServicer
from behest.api.snapshot_service import SnapshotServicer
from behest.api.usage_service import UsageServicer
from behest.api.worker_service import WorkerServicer
from behest.config import AuthSettings, TlsSettings
from behest.runs.operations import Operations

SERVICES = (
    "agent.v1.RunService",
    "agent.v1.CompactionService",
    "agent.v1.SnapshotService",
    "agent.v1.UsageService",
    "agent.v1.SessionService",
    "agent.v1.ToolService",
    "agent.v1.ProviderService",
    "agent.v1.ToolExecutionService",
    "agent.v1.WorkerService",
    "agent.v1.AgentService",
)

# The health service name of each MCP server (ApiServer.mcp_server).
MCP = "behest.mcp."


def agent_services(runs: Operations, admission: Admission) -> dict[str, list[GuardedMethod]]:
    """Every agent.v1 service's guarded methods by the service's full name: the one
    implementation each door serves (gRPC here; Connect and gRPC-Web in doors/)."""
    servicers = [
        (run_pb2, "RunService", RunServicer(runs, admission)),
        (run_pb2, "CompactionService", CompactionServicer(runs)),
        (run_pb2, "SnapshotService", SnapshotServicer(runs)),
        (run_pb2, "UsageService", UsageServicer(runs)),
        (session_pb2, "SessionService", SessionServicer(runs)),
        (catalog_pb2, "ToolService", ToolServicer(runs)),
        (catalog_pb2, "ProviderService", ProviderServicer(runs)),
        (execution_pb2, "ToolExecutionService", ToolExecutionServicer(runs)),
        (worker_pb2, "WorkerService", WorkerServicer(runs)),
        (agent_pb2, "AgentService", AgentServicer(runs, admission)),
    ]
    services = {}
    for module, name, servicer in servicers:
        service = module.DESCRIPTOR.services_by_name[name]
        services[service.full_name] = guarded_methods(service, servicer, admission)
    return services


class ApiServer:
    """Binds, serves and stops the gRPC server; `port` is known after `start`.

    Every call passes the authentication interceptor (api/auth.py) first; the port speaks TLS
    when `[tls]` has a certificate, and wants client certificates when it has a client CA.
    """

    def __init__(
        self,
        runs: Operations,
        *,
        listen: str,
        admission: Admission,
        auth: AuthSettings,
        tls: TlsSettings,
        max_receive_message_bytes: int,
    ) -> None:
        self._listen = listen
        self._tls = tls
        self.port = 0
        self._health = HealthServicer()
        self._health_tasks: set[asyncio.Task[None]] = set()
        interceptor = AuthInterceptor(Authenticator(auth, tls), protect_health=auth.protect_health)
        self._server = grpc.aio.server(
            interceptors=[interceptor],
            options=[("grpc.max_receive_message_length", max_receive_message_bytes)],
        )
        self.services = agent_services(runs, admission)
        for name, methods in self.services.items():
            self._server.add_generic_rpc_handlers((generic_handler(name, methods),))
        self._server.add_generic_rpc_handlers((health_handler(self._health),))
        self._server.add_generic_rpc_handlers(reflection_handlers((*SERVICES, HEALTH)))

    async def start(self) -> None:
        if self._tls.enabled:
            self.port = self._server.add_secure_port(self._listen, _credentials(self._tls))
        else:
            self.port = self._server.add_insecure_port(self._listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {self._listen}")
        await self._server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)

    def writes_land(self, writable: bool) -> None:
        """Health follows the database: NOT_SERVING while writes fail (disk full, locked),
        SERVING again once they land (ignored once shutting down). Reads keep working."""
        status = health_pb2.HealthCheckResponse.SERVING
        if not writable:
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        task = asyncio.get_running_loop().create_task(self._set_health(status))
        self._health_tasks.add(task)
        task.add_done_callback(self._health_tasks.discard)

    def mcp_server(self, name: str, *, ready: bool) -> None:
        """An MCP server's state as a service of its own, `behest.mcp.NAME`: SERVING while it
        is ready, NOT_SERVING otherwise (the server as a whole is not affected)."""
        status = health_pb2.HealthCheckResponse.SERVING
        if not ready:
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        task = asyncio.get_running_loop().create_task(self._health.set(MCP + name, status))
        self._health_tasks.add(task)
        task.add_done_callback(self._health_tasks.discard)

    async def _set_health(self, status: health_pb2.HealthCheckResponse.ServingStatus) -> None:
        for name in ("", *SERVICES):
            await self._health.set(name, status)

    async def stop_accepting(self) -> None:
        """Report NOT_SERVING so balancers drain us; RPCs still work."""
        await self._health.enter_graceful_shutdown()

    async def stop(self, grace_s: float) -> None:
        await self._server.stop(grace_s)


def _credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """The port's TLS credentials; with a client CA, clients must show a certificate."""
    key, cert = _read(tls.key_file, "key_file"), _read(tls.cert_file, "cert_file")
    client_ca = _read(tls.client_ca_file, "client_ca_file") if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _read(path: str, setting: str) -> bytes:
    if "\n" in path or "-----BEGIN" in path or len(path) > 4096:
        # Not a path: most likely the certificate or key itself, which must not be echoed.
        raise OSError(f"setting 'tls.{setting}' must be a file's path, not its contents")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OSError(f"setting 'tls.{setting}': cannot read {path}: {exc.strerror}") from None
