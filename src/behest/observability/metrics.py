"""behest's metrics: OpenTelemetry instruments (names prefixed behest_) and their attribute sets.

One `Metrics` per App, made from its meter (telemetry.py); without one the instruments are
the API's no-ops. Attribute sets are built once and reused (dicts cached by their values), so
a measurement on a hot path is one dict lookup and the instrument's own call. Latencies are
in seconds. Labels stay few and bounded: provider and model names come from the settings, a
tool name the model made up is counted as "_unknown", tenants only label breaker state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from opentelemetry.metrics import CallbackOptions, Histogram, Meter, NoOpMeter, Observation

from behest.domain.compaction import CircuitBreakerState
from behest.domain.spend import FailureCode

Attributes = dict[str, str]

# Seconds: from a sub-millisecond commit to a minutes-long model call or tool.
_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# Writes per group commit (commit_batch_max defaults to 500).
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
UNKNOWN_TOOL = "_unknown"
_NONE: Attributes = {}


class Metrics:
    """The instruments of one App (no-ops without a meter)."""

    def __init__(self, meter: Meter | None = None) -> None:
        self.enabled = meter is not None
        m = meter if meter is not None else NoOpMeter("behest")
        self.runs_started = m.create_counter(
            "behest_runs_started", "{run}", "Runs created (an idempotent repeat is not counted)"
        )
        self.runs_finished = m.create_counter(
            "behest_runs_finished", "{run}", "Runs whose end is durable, by outcome and failure"
        )
        self.open_streams = m.create_up_down_counter(
            "behest_open_streams", "{stream}", "Server streams open now, by method"
        )
        self.events_written = m.create_counter(
            "behest_events_written", "{event}", "Events committed by the event log"
        )
        self.commit_batch_size = m.create_histogram(
            "behest_commit_batch_size",
            "{write}",
            "Writes per group commit",
            explicit_bucket_boundaries_advisory=_BATCH_BUCKETS,
        )
        self.commit_duration = _seconds(m, "behest_commit_duration", "Group commit latency")
        self.first_event = _seconds(
            m, "behest_stream_first_event", "From a stream's start to its first event sent"
        )
        self.model_call_duration = _seconds(
            m, "behest_model_call_duration", "Model call attempts, by provider, model, outcome"
        )
        self.model_tokens = m.create_counter(
            "behest_model_tokens", "{token}", "Tokens of model calls, by provider, model, type"
        )
        self.tool_duration = _seconds(m, "behest_tool_duration", "Tool executions, by outcome")
        self.model_retries = m.create_counter(
            "behest_model_retries", "{retry}", "Model call attempts retried, by provider, error"
        )
        self.compactions = m.create_counter(
            "behest_compactions", "{compaction}", "Compactions, by outcome and reason"
        )
        self.lease_adoptions = m.create_counter(
            "behest_lease_adoptions", "{run}", "Runs adopted, by whose claim they had"
        )
        self.lease_renewals = m.create_counter(
            "behest_lease_renewals", "{round}", "Lease renewal rounds, by outcome"
        )
        self.runs_lost = m.create_counter(
            "behest_runs_lost", "{run}", "Runs stopped here because another node claimed them"
        )
        self._meter = m
        self._breakers: dict[str, tuple[CircuitBreakerState, float]] = {}
        self._attrs: dict[tuple[str, ...], Attributes] = {}
        self._finished = _finished_attributes()
        m.create_observable_gauge(
            "behest_compaction_breaker_open",
            [self._observe_breakers],
            "1",
            "1 while a tenant's compaction circuit breaker is open, else 0",
        )

    def attrs(self, *pairs: str) -> Attributes:
        """The one attribute dict for these key, value, key, value… strings."""
        found = self._attrs.get(pairs)
        if found is None:
            found = self._attrs[pairs] = dict(zip(pairs[::2], pairs[1::2], strict=True))
        return found

    def watch_active_runs(self, count: Callable[[], int]) -> None:
        """Report `count()` as behest_active_runs whenever metrics are collected."""
        self._meter.create_observable_gauge(
            "behest_active_runs",
            [lambda options: [Observation(count())]],
            "{run}",
            "Runs this process holds now (executing, being created, or being ended)",
        )

    def watch_mcp_servers(
        self, states: Callable[[], Iterable[tuple[str, str]]], all_states: Iterable[str]
    ) -> None:
        """Report each MCP server's state, `states()` as (server, state) pairs, whenever
        metrics are collected: behest_mcp_server_state is 1 for its state, 0 for the others."""
        every = tuple(all_states)

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            for server, state in states():
                for one in every:
                    yield Observation(int(one == state), self.attrs("server", server, "state", one))

        self._meter.create_observable_gauge(
            "behest_mcp_server_state",
            [observe],
            "1",
            "1 for the state each MCP server is in now (starting, ready, restarting, failed)",
        )

    def run_finished(self, outcome: str, code: FailureCode = FailureCode.UNSPECIFIED) -> None:
        """A run's end is durable: "completed", "cancelled" or "failed" with its code."""
        self.runs_finished.add(1, self._finished.get((outcome, code), _NONE))

    def model_call(self, call: ModelCall, seconds: float, *, ok: bool) -> None:
        """One model call attempt took `seconds`."""
        self.model_call_duration.record(seconds, call.ok if ok else call.error)

    def tokens(self, call: ModelCall, input_tokens: int, output_tokens: int) -> None:
        """A model call's usage."""
        if input_tokens:
            self.model_tokens.add(input_tokens, call.input)
        if output_tokens:
            self.model_tokens.add(output_tokens, call.output)

    def tool(self, name: str, seconds: float, *, error: bool) -> None:
        """One tool execution took `seconds`."""
        outcome = "error" if error else "ok"
        self.tool_duration.record(seconds, self.attrs("tool", name, "outcome", outcome))

    def retried(self, provider: str, error: str) -> None:
        """A model call attempt failed transiently and is tried again."""
        self.model_retries.add(1, self.attrs("provider", provider, "error", error))

    def compacted(self, outcome: str, reason: str) -> None:
        """A compaction ended: "summarised", "pruned" or "failed"; reason threshold|overflow."""
        self.compactions.add(1, self.attrs("outcome", outcome, "reason", reason))

    def breaker(self, tenant: str, state: CircuitBreakerState, cooldown_s: float) -> None:
        """The latest known state of a tenant's compaction circuit breaker."""
        if self.enabled:
            self._breakers[tenant] = (state, cooldown_s)

    def _observe_breakers(self, options: CallbackOptions) -> Iterable[Observation]:
        now = datetime.now(UTC)
        for tenant, (state, cooldown_s) in list(self._breakers.items()):
            is_open = state.is_open(now=now, cooldown_s=cooldown_s)
            yield Observation(int(is_open), self.attrs("tenant", tenant))


class ModelCall:
    """The attribute sets of one provider and model's calls, bound once per run."""

    __slots__ = ("error", "input", "ok", "output")

    def __init__(self, metrics: Metrics, provider: str, model: str) -> None:
        pm = ("provider", provider, "model", model)
        self.ok = metrics.attrs(*pm, "outcome", "ok")
        self.error = metrics.attrs(*pm, "outcome", "error")
        self.input = metrics.attrs(*pm, "token_type", "input")
        self.output = metrics.attrs(*pm, "token_type", "output")


def _seconds(meter: Meter, name: str, description: str) -> Histogram:
    return meter.create_histogram(
        name, "s", description, explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS
    )


def _finished_attributes() -> dict[tuple[str, FailureCode], Attributes]:
    """Every attribute set of behest_runs_finished, made once."""
    sets: dict[tuple[str, FailureCode], Attributes] = {
        ("completed", FailureCode.UNSPECIFIED): {"outcome": "completed"},
        ("cancelled", FailureCode.UNSPECIFIED): {"outcome": "cancelled"},
    }
    for code in FailureCode:
        sets["failed", code] = {"outcome": "failed", "failure_code": code.name.lower()}
    return sets
