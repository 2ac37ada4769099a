"""The grpc.aio server: our three services, grpc.health.v1, reflection, stream cap."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api.compaction_service import CompactionServicer
from behest.api.handlers import StreamLimit, generic_handler
from behest.api.requests import RequestLimits
from behest.api.run_service import RunServicer
from behest.api.snapshot_service import SnapshotServicer
from behest.runs.operations import Operations

SERVICES = ("agent.v1.RunService", "agent.v1.CompactionService", "agent.v1.SnapshotService")


class ApiServer:
    """Binds, serves and stops the gRPC server; `port` is known after `start`."""

    def __init__(
        self,
        runs: Operations,
        *,
        listen: str,
        limits: RequestLimits,
        max_streams: int,
        max_receive_message_bytes: int,
    ) -> None:
        self._listen = listen
        self.port = 0
        self._health = health.aio.HealthServicer()
        self._server = grpc.aio.server(
            options=[("grpc.max_receive_message_length", max_receive_message_bytes)]
        )
        streams = StreamLimit(max_streams)
        servicers = {
            "RunService": RunServicer(runs, limits),
            "CompactionService": CompactionServicer(runs),
            "SnapshotService": SnapshotServicer(runs),
        }
        for name, servicer in servicers.items():
            self._server.add_generic_rpc_handlers(
                (generic_handler(pb.DESCRIPTOR.services_by_name[name], servicer, streams),)
            )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )

    async def start(self) -> None:
        self.port = self._server.add_insecure_port(self._listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {self._listen}")
        await self._server.start()
        for name in ("", *SERVICES):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop_accepting(self) -> None:
        """Report NOT_SERVING so balancers drain us; RPCs still work."""
        await self._health.enter_graceful_shutdown()

    async def stop(self, grace_s: float) -> None:
        await self._server.stop(grace_s)
