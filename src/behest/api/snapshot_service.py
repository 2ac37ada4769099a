"""agent.v1.SnapshotService: the saved state of runs in flight or interrupted."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.api.auth import current_caller
from behest.api.fields import uuid_field
from behest.runs.operations import Operations


class SnapshotServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def ListSnapshots(
        self, request: pb.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSnapshotsResponse:
        snapshots = await self._runs.snapshots(current_caller())
        return pb.ListSnapshotsResponse(snapshots=[convert.snapshot(s) for s in snapshots])

    async def GetSnapshot(
        self, request: pb.GetSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSnapshotResponse:
        snapshot = await self._runs.snapshot(current_caller(), uuid_field(request.run_id, "run_id"))
        return pb.GetSnapshotResponse(snapshot=convert.snapshot(snapshot))

    async def DeleteSnapshot(
        self, request: pb.DeleteSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSnapshotResponse:
        await self._runs.delete_snapshot(current_caller(), uuid_field(request.run_id, "run_id"))
        return pb.DeleteSnapshotResponse()
