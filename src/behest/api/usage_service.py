"""agent.v1.UsageService: tokens and cost of the caller's tenant, per day and session."""

from __future__ import annotations

from datetime import UTC, datetime

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.api.auth import current_caller
from behest.api.queries import usage_query
from behest.runs.operations import Operations


class UsageServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def GetUsage(
        self, request: pb.GetUsageRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetUsageResponse:
        query = usage_query(request, today=datetime.now(UTC).date().isoformat())
        report = await self._runs.usage(
            current_caller(),
            session_id=query.session_id,
            from_day=query.from_day,
            to_day=query.to_day,
        )
        return convert.usage_report(report)
