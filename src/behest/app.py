"""Composition root: settings → store → event log → providers/tools → executor → server.

`App.stop` is ordered and idempotent: stop taking runs → end workers' streams (they go to
another replica) → stop pruning (retention) → drain or cancel runs → stop the server, then
the inspector's HTTP side → flush the event log → close the store → export the last spans
and metrics.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from behest import event_loop
from behest.api.admission import Admission
from behest.api.agent_files import apply_settings_agents, checked_settings_agents
from behest.api.auth import Authenticator, metrics_guard
from behest.api.content import ContentLimits
from behest.api.server import ApiServer
from behest.api.tenancy import Tenancy
from behest.assembly import telemetry_from, tools_from, worker_hub
from behest.config import Settings
from behest.domain.spend import TenantSpend
from behest.errors import FailedPrecondition
from behest.events.log import EventLog
from behest.observability import logs, telemetry
from behest.providers.factory import build_registry
from behest.runs.asking import AskPolicy
from behest.runs.builder import LoopBuilder
from behest.runs.compaction_settings import CompactionSettings
from behest.runs.executor import Executor
from behest.runs.leases import this_process
from behest.runs.loop_limits import LoopLimits
from behest.runs.operations import Operations
from behest.runs.retention import Retention
from behest.runs.sub_runs import SubRunLimits, SubRuns
from behest.runs.waiting import WaitPolicy
from behest.store.sql.channel import Channel
from behest.store.sql.sqlite_lock import sqlite_lock
from behest.store.sql.store import SqlStore
from behest.tools.mcp_source import mcp_tool_source
from behest.tools.mcp_states import STATES as MCP_STATES
from behest.tools.server_tools import ServerTools

if TYPE_CHECKING:
    from behest.observability.metrics_endpoint import Security
    from behest.web.app import WebServer

log = logging.getLogger(__name__)


class App:
    """One behest server process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # One identity per process; SQLite has one writer: its database is locked while served.
        self.node = this_process(settings.node_id)
        self.telemetry = telemetry_from(settings, instance=self.node.name)
        url = settings.effective_database_url
        self.store = SqlStore(
            url,
            node=self.node.name,
            lease_s=settings.run_lease_s,
            busy_timeout_s=settings.sqlite_busy_timeout_s,
        )
        self.database_lock = sqlite_lock(url)
        self.server_tools = self._server_tools(settings)
        self.event_log = EventLog(
            self.store,
            batch_max=settings.commit_batch_max,
            window_s=settings.commit_window_ms / 1000,
            metrics=self.telemetry.metrics,
        )
        self.providers = build_registry(
            settings.provider_configs(),
            retry=settings.retry_policy,
            timeout_s=settings.provider_timeout_s,
        )
        # Read by every run's start, updated through the API: one instance for both.
        compaction_settings = CompactionSettings(self.store)
        self.tenancy = Tenancy(settings)
        self.workers = worker_hub(settings, self.store, self.node.name)
        self.executor = self._executor(settings, compaction_settings)
        self.channel = self._channel(url)
        self.runs = Operations(
            store=self.store,
            event_log=self.event_log,
            executor=self.executor,
            providers=self.providers,
            tools=self.server_tools,
            compaction_settings=compaction_settings,
            cooldown_s=settings.compaction_cooldown_s,
            approver_role=settings.auth.approver_role,
            reconciler_role=settings.auth.reconciler_role,
            workers=self.workers,
            worker_role=settings.auth.worker_role,
            stream_ticket_ttl_s=settings.stream_ticket_ttl_s,
        )
        self._edges(settings)
        self.retention = Retention(
            self.store,
            days=settings.retention_days,
            interval_s=settings.retention_interval_s,
            batch=settings.retention_batch,
        )
        self._started = False
        self._stopped = False

    def _server_tools(self, settings: Settings) -> ServerTools:
        """What runs and ListTools see: the server's registry and its MCP servers' tools as
        they are (their states watched by the metrics)."""
        self.tools = tools_from(settings)
        self.mcp = mcp_tool_source(
            settings.mcp_servers,
            start_timeout_s=settings.mcp_start_timeout_s,
            restart_max_s=settings.mcp_restart_max_s,
        )
        self.telemetry.metrics.watch_mcp_servers(
            lambda: [(s.name, s.state) for s in self.mcp.servers()], MCP_STATES
        )
        return ServerTools(self.tools, self.mcp)

    def _channel(self, url: str) -> Channel | None:
        """Replicas on PostgreSQL hear of each other's commits and cancels (LISTEN/NOTIFY)."""
        if make_url(url).get_backend_name() != "postgresql":
            return None
        return Channel(
            url,
            node=self.node.name,
            on_events=self.event_log.remote_commits,
            on_signal=self._signalled,
            on_state=self.event_log.remote_state,
        )

    def _edges(self, settings: Settings) -> None:
        """The doors: admission, the gRPC server (whose health follows the database's
        writes) and, when http_listen is set, the HTTP listener: the doors (doors/) in front of
        the run inspector (web/)."""
        self.admission = Admission(
            self.tenancy,
            max_request_id_bytes=settings.max_request_id_bytes,
            max_wait_s=settings.max_wait_s,
            content=ContentLimits(
                max_parts=settings.max_content_parts,
                max_part_bytes=settings.max_content_part_bytes,
                max_bytes=settings.max_content_bytes,
            ),
        )
        self.server = ApiServer(
            self.runs,
            listen=settings.listen,
            admission=self.admission,
            auth=settings.auth,
            tls=settings.tls,
            max_receive_message_bytes=settings.max_receive_message_bytes,
        )
        self.event_log.health.on_change(self.server.writes_land)
        self.mcp.watch(lambda state: self.server.mcp_server(state.name, ready=state.ready))
        self.web: WebServer | None = None
        if settings.http_listen:
            from behest.doors.assemble import doors_front  # only when on: Starlette, uvicorn,
            from behest.web.app import WebServer  # Jinja2, connectrpc

            self.web = WebServer(
                self.runs,
                listen=settings.http_listen,
                auth=settings.auth,
                tls=settings.tls,
                open_streams=self.admission.open_streams,
                front=doors_front(self.server.services, settings, self.runs),
                grpc_port=lambda: self.server.port,
            )

    def _executor(self, settings: Settings, compaction: CompactionSettings) -> Executor:
        sub_runs = SubRuns(
            store=self.store,
            event_log=self.event_log,
            limits=SubRunLimits(
                max_depth=settings.sub_agent_max_depth,
                max_children=settings.sub_agent_max_children,
            ),
            check_model=self.providers.check,
            tool_names=self.server_tools.names,
        )
        builder = LoopBuilder(
            store=self.store,
            providers=self.providers,
            tools=self.server_tools,
            limits=LoopLimits(
                max_iterations=settings.max_iterations,
                tool_concurrency=settings.tool_concurrency,
                compaction_cooldown_s=settings.compaction_cooldown_s,
                coalesce_text_deltas=settings.coalesce_text_deltas,
                waits=WaitPolicy(
                    approval_timeout_s=settings.approval_timeout_s,
                    client_tool_timeout_s=settings.client_tool_timeout_s,
                    outcome_unknown_timeout_s=settings.outcome_unknown_timeout_s,
                ),
                asks=AskPolicy(timeout_s=settings.elicitation_timeout_s),
                node=self.node.name,
            ),
            compaction_settings=compaction,
            spend_limits=self._spend_limits,
            sub_runs=sub_runs,
            workers=self.workers,
        )
        executor = Executor(
            store=self.store,
            event_log=self.event_log,
            builder=builder,
            max_concurrent_runs=settings.max_concurrent_runs,
            max_runs_of=lambda tenant: self.tenancy.limits(tenant).max_concurrent_runs,
            node=self.node,
            lease_s=settings.run_lease_s,
            sole_writer=self.database_lock is not None,
            resume_runs=settings.resume_runs,
            telemetry=self.telemetry,
        )
        sub_runs.spawner = executor
        return executor

    def _signalled(self, kind: str, name: str) -> None:
        if kind == "cancel":
            self.executor.cancel_signalled(name)
        else:
            self.workers.signalled(kind, name)

    def _spend_limits(self, tenant: str) -> TenantSpend:
        return self.tenancy.limits(tenant).spend

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        telemetry.setup()
        self.telemetry.start(self._metrics_security())
        # The MCP servers start beside everything else: nothing waits for them but the
        # calls of their tools (and runs that name them): tools/server_tools.py.
        await self.mcp.start()
        agents = checked_settings_agents(self.settings.agents, self.runs, self.admission)
        if self.database_lock is not None:
            self.database_lock.acquire()
        await self.store.start()
        if self.channel is not None:
            await self.channel.start()
        await self.event_log.start()
        await self.executor.start()
        await apply_settings_agents(agents, self.runs)
        # The server's RPCs run in tasks of the context it starts in: this App's telemetry.
        await self.telemetry.run(self.server.start())
        if self.web is not None:
            await self.telemetry.run(self.web.start())
        self.retention.start()
        self._started = True
        log.info(
            "behest serving",
            extra={
                "listen": self.settings.listen,
                "port": self.port,
                "node": self.node.name,
                "event_loop": event_loop.name(),
                "tools": self.tools.names(),
                "mcp_servers": self.mcp.status(),
                "traces_to": self.telemetry.traces_to,
                "metrics_port": self.telemetry.metrics_port,
                "http_port": self.web.port if self.web is not None else None,
            },
        )

    def _metrics_security(self) -> Security:
        """The Prometheus endpoint's protection: the server's TLS (client certificates with
        mtls) and, with bearer tokens, a token of a caller with the metrics role."""
        from behest.observability.metrics_endpoint import Security

        settings = self.settings
        tls, auth = settings.tls, settings.auth
        return Security(
            cert_file=tls.cert_file,
            key_file=tls.key_file,
            client_ca_file=tls.client_ca_file if auth.mode == "mtls" else "",
            guard=metrics_guard(Authenticator(auth, tls), auth.metrics_role),
        )

    async def stop(self, grace_s: float | None = None) -> None:
        if self._stopped:
            return
        self._stopped = True
        grace = self.settings.shutdown_grace_s if grace_s is None else grace_s
        if self._started:
            await self.server.stop_accepting()
        # Workers reconnect to another replica, where their results are still taken.
        await self.workers.stop()
        await self.retention.stop()
        await self.executor.stop(grace)
        # Streams end once their runs have; a short grace lets them send the last events.
        await self.server.stop(1.0)
        if self.web is not None:
            await self.web.stop()  # its live tails end here
        await self.event_log.stop()
        if self.channel is not None:
            await self.channel.stop()
        await self.store.close()
        if self.database_lock is not None:
            self.database_lock.release()
        await self.providers.aclose()
        await self.mcp.stop()
        await self.telemetry.shutdown()  # the last spans and metrics: the runs' ends
        log.info("behest stopped")


def serve(settings: Settings) -> str:
    """Run the server until SIGTERM or SIGINT, then shut down gracefully. Returns why it could
    not start ("" once it served): another process holds its database or node name."""
    logs.setup(settings.log_level, settings.log_format)
    return event_loop.run(_serve(settings), use_uvloop=settings.use_uvloop)


async def _serve(settings: Settings) -> str:
    app = App(settings)
    logs.tag(node=app.node.name)  # the service.instance.id of its spans and metrics
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await app.start()
    except FailedPrecondition as exc:
        log.error("behest cannot start: %s", exc)
        await app.stop(0)
        return str(exc)
    try:
        await stop.wait()
        log.info("shutting down", extra={"grace_s": settings.shutdown_grace_s})
    finally:
        await app.stop()
    return ""
