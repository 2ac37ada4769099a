"""How the `behest` command writes runs, outputs, sessions, tools, providers, usage, agents
and stored events: tables and a field per line, over behest.client's types, in the words of
behest/wording.py."""

from __future__ import annotations

import json
from collections.abc import Sequence

from google.protobuf import json_format

from behest.client import (
    Agent,
    AgentVersion,
    Cost,
    Event,
    Message,
    Model,
    Output,
    PendingCall,
    PendingCallKind,
    Provider,
    Run,
    RunStatus,
    Session,
    TokenUsage,
    Tool,
    Usage,
    VersionedAgent,
)
from behest.wording import call, code, money, plural, shorten, time, tokens

# The command's exit codes a run's end gives (see entry.py for the others).
EXIT_OK = 0
EXIT_RUN_NOT_COMPLETED = 1

STATUSES = [status.name.lower() for status in RunStatus if status != RunStatus.UNSPECIFIED]


def format_pending(calls: Sequence[PendingCall]) -> str:
    """A table of the calls a run waits for, one line each."""
    rows = [("CALL", "WAITS FOR", "TOOL", "EXPIRES", "ARGUMENTS")]
    rows += [
        (c.call.id, _waits_for(c), c.call.name, time(c.expires_at), shorten(c.call.arguments))
        for c in calls
    ]
    return table(rows)


def format_runs(runs: Sequence[Run]) -> str:
    """A table of runs, one line each (and the agent of each, when one is of an agent)."""
    agents = any(r.agent_name for r in runs)
    rows = [("RUN", "STATUS", "MODEL", "CREATED", *(("AGENT",) if agents else ()), "SESSION")]
    rows += [
        (
            r.id,
            status_name(r.status),
            f"{r.provider}/{r.model}",
            time(r.created_at),
            *((_agent_of(r) or "-",) if agents else ()),
            r.session_id,
        )
        for r in runs
    ]
    return table(rows)


def _agent_of(run: Run) -> str:
    """The agent and version a run is of, and the one it is under after a handoff."""
    if not run.agent_name:
        return ""
    text = f"{run.agent_name}@{run.agent_version}"
    current = f"{run.current_agent}@{run.current_agent_version}"
    return text if not run.current_agent or current == text else f"{text} (now {current})"


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Aligned columns; the last one is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in rows
    )


def format_run(run: Run) -> str:
    """One run, a field per line."""
    fields = [
        ("run", run.id),
        ("session", run.session_id),
        ("status", status_name(run.status)),
        ("model", f"{run.provider}/{run.model}"),
        *((("agent", _agent_of(run)),) if run.agent_name else ()),
        ("metadata", run.metadata or "-"),
        ("created", time(run.created_at)),
        ("updated", time(run.updated_at)),
    ]
    if run.client_tools:
        fields.append(("client tools", ", ".join(t.name for t in run.client_tools)))
    if run.approval_required_tools:
        fields.append(("approvals", ", ".join(run.approval_required_tools)))
    if run.approve_side_effects:
        fields.append(("approvals", "every tool not marked read-only"))
    fields += _spend_fields(run)
    width = max(9, *(len(name) for name, _ in fields))
    text = "\n".join(f"{name:<{width}} {value}" for name, value in fields)
    if run.status == RunStatus.WAITING_FOR_INPUT:
        text += f"\n\nthe run waits for answers; see them with: behest pending {run.id}"
    return text


def _spend_fields(run: Run) -> list[tuple[str, str]]:
    """What a run spent, how it failed, whose sub-agent it is."""
    fields = [("tokens", str(run.usage.total_tokens))]
    if run.cost is not None:
        fields.append(("cost", money(run.cost)))
    if run.error:
        fields.append(("error", f"{run.error}{code(run.failure_code)}"))
    if run.parent_run_id:
        fields.append(("parent", run.parent_run_id))
    return fields


def format_output(output: Output) -> str:
    """A finished run's summary, then the text of the messages it committed."""
    usage = output.usage
    lines = [
        f"run {output.run_id}  session {output.session_id}",
        f"{output.finish_reason.name.lower()}, {plural(output.iterations, 'iteration')}, "
        f"{tokens(usage)}" + (f", {money(output.cost)}" if output.cost is not None else ""),
    ]
    for message in output.messages:
        calls = [f"→ tool {call(c)}" for c in message.tool_calls]
        lines += ["", f"[{message.role}]", *([message.text] if message.text else []), *calls]
    return "\n".join(lines)


def format_sessions(sessions: Sequence[Session]) -> str:
    """A table of sessions, one line each."""
    rows = [("SESSION", "RUNS", "MESSAGES", "CREATED", "UPDATED", "ACTIVE RUN")]
    rows += [
        (
            s.id,
            str(s.run_count),
            str(s.message_count),
            time(s.created_at),
            time(s.updated_at),
            s.active_run_id or "-",
        )
        for s in sessions
    ]
    return table(rows)


def format_session(session: Session) -> str:
    """One session, a field per line."""
    fields = [
        ("session", session.id),
        ("runs", str(session.run_count)),
        ("messages", str(session.message_count)),
        ("created", time(session.created_at)),
        ("updated", time(session.updated_at)),
        ("active run", session.active_run_id or "-"),
    ]
    return "\n".join(f"{name:<10} {value}" for name, value in fields)


def format_message(message: Message) -> str:
    """A transcript message: its role (and the call a tool result answers), text, calls."""
    head = f"[{message.role}]"
    if message.tool_call_id:
        head += f" {message.tool_name} ({message.tool_call_id})"
    calls = [f"→ tool {call(c)}" for c in message.tool_calls]
    return "\n".join([head, *([message.text] if message.text else []), *calls])


def format_event(event: Event) -> str:
    """One stored event on a line: its sequence, kind and payload (long ones shortened).

    The payload is written in protobuf's JSON mapping, read from the event's wire message
    (`.raw`): that mapping is what `--json` and scripts already read."""
    kind = event.kind or "unknown"
    raw = event.raw
    body = json_format.MessageToDict(
        getattr(raw, kind) if kind != "unknown" else raw, preserving_proto_field_name=True
    )
    payload = json.dumps(body, ensure_ascii=False, separators=(",", ":")) if body else ""
    return f"{event.sequence:>6}  {time(event.timestamp)}  {kind}  {shorten(payload)}".rstrip()


def format_tools(tools: Sequence[Tool]) -> str:
    """A table of tools: source, what the loop may do with each, timeout, description (or
    why the server does not offer it, or why it is unavailable now)."""
    rows = [("TOOL", "SOURCE", "FLAGS", "TIMEOUT", "DESCRIPTION")]
    rows += [
        (
            t.name,
            t.source,
            _flags(t),
            f"{t.timeout_s:g} s" if t.timeout_s else "-",
            shorten(_described(t)),
        )
        for t in tools
    ]
    return table(rows)


def _described(tool: Tool) -> str:
    """Its description's first line; why it is not offered or unavailable instead."""
    if tool.unsupported:
        return f"not offered: {tool.unsupported}"
    if tool.unavailable_reason:
        return f"UNAVAILABLE: {tool.unavailable_reason}"
    return tool.description.strip().split("\n", 1)[0]


def _flags(tool: Tool) -> str:
    names = ("read_only", "concurrency_safe", "idempotent", "requires_approval")
    return ",".join(name for name in names if getattr(tool, name)) or "-"


def format_providers(providers: Sequence[Provider]) -> str:
    """A table of providers' models, with limits and prices per million tokens."""
    rows = [("PROVIDER", "TYPE", "MODEL", "CONTEXT", "MAX OUTPUT", "PRICES IN/OUT PER 1M")]
    for provider in providers:
        for model in provider.models or (Model(""),):
            name = model.name or "(any)"
            rows.append(
                (
                    provider.id,
                    provider.type,
                    name + (" (default)" if name == provider.default_model else ""),
                    str(model.context_window) if model.context_window else "-",
                    str(model.max_output_tokens) if model.max_output_tokens else "-",
                    _prices(model),
                )
            )
    return table(rows)


def _prices(model: Model) -> str:
    if not model.input_price:
        return "-"
    return f"{model.input_price} / {model.output_price} {model.currency}"


def format_usage(usage: Usage) -> str:
    """A table of days: runs, tokens (input, cached, output) and cost; then the total."""
    rows = [("DAY", "RUNS", "TOKENS", "INPUT", "CACHED", "OUTPUT", "COST")]
    for day in usage.days:
        rows.append((day.day, str(day.runs), *_tokens(day.usage), _cost(day.cost)))
    rows.append(("total", "", *_tokens(usage.usage), _cost(usage.cost)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _tokens(usage: TokenUsage) -> tuple[str, str, str, str]:
    cached = usage.cached_input_tokens + usage.cache_write_tokens
    return (str(usage.total_tokens), str(usage.input_tokens), str(cached), str(usage.output_tokens))


def _cost(cost: Cost | None) -> str:
    return money(cost) if cost is not None and cost.amount else "-"


def _waits_for(call: PendingCall) -> str:
    if call.kind == PendingCallKind.OUTCOME_UNKNOWN:
        return f"reconciliation of execution {call.execution_id}"
    return _kind(call.kind)


def _kind(value: PendingCallKind) -> str:
    if value == PendingCallKind.APPROVAL:
        return "approval"
    if value == PendingCallKind.CLIENT_TOOL:
        return "client result"
    if value == PendingCallKind.OUTCOME_UNKNOWN:
        return "reconciliation"
    if value == PendingCallKind.ELICITATION:
        return "reply"
    return str(value.value)  # a kind newer than this CLI


def status_name(status: RunStatus) -> str:
    """A run status as the CLI writes it: completed, waiting_for_input, …"""
    return status.name.lower()


def format_agents(agents: Sequence[Agent]) -> str:
    """A table of agents: the latest version, aliases, when changed, description."""
    rows = [("AGENT", "LATEST", "ALIASES", "UPDATED", "DESCRIPTION")]
    rows += [
        (
            a.name + (" (archived)" if a.archived else ""),
            str(a.latest_version),
            _aliases(a.aliases) or "-",
            time(a.updated_at),
            shorten(a.description.strip().split("\n", 1)[0]) or "-",
        )
        for a in agents
    ]
    return table(rows)


def format_agent(found: VersionedAgent) -> str:
    """An agent and one of its versions, a field per line (its definition not included)."""
    agent, version = found.agent, found.version
    latest = " (the latest)" if version.version == agent.latest_version else ""
    fields = [
        ("agent", agent.name + (" (archived)" if agent.archived else "")),
        ("version", f"{version.version}{latest} of {agent.latest_version}"),
        ("aliases", _aliases(agent.aliases) or "-"),
        ("created", time(version.created_at) + _by(version.created_by)),
        ("updated", time(agent.updated_at)),
    ]
    return "\n".join(f"{name:<8} {value}" for name, value in fields)


def format_versions(agent: Agent, versions: Sequence[AgentVersion]) -> str:
    """A table of an agent's versions, newest first, with the aliases at each."""
    at: dict[int, list[str]] = {}
    for alias, number in sorted(agent.aliases.items()):
        at.setdefault(number, []).append(alias)
    rows = [("VERSION", "CREATED", "BY", "ALIASES", "DESCRIPTION")]
    rows += [
        (
            str(v.version),
            time(v.created_at),
            v.created_by or "-",
            ", ".join(at.get(v.version, ())) or "-",
            shorten(v.definition.description.strip().split("\n", 1)[0]) or "-",
        )
        for v in versions
    ]
    return table(rows)


def _aliases(aliases: dict[str, int]) -> str:
    return ", ".join(f"{alias} → {version}" for alias, version in sorted(aliases.items()))


def _by(principal: str) -> str:
    return f" by {principal}" if principal else ""
