"""What the agents pages show: an agent's versions side by side, one column per version
(newest first) and one row per field of their definitions, each cell marked when it differs
from the version before it; a run's agent in a few words.

Pure: the pages (web/agent_pages.py) read the versions through `Operations` and give them
here. Every value is plain text for the autoescaping templates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from behest.domain.agents import AgentDefinition, AgentVersion
from behest.domain.runs import Run
from behest.domain.waits import ClientTool

# The longest text one cell shows (instructions may be long; the page stays readable).
MAX_CELL_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    # It differs from the same field of the version before (the column to its right).
    changed: bool = False
    # Agents the cell names (sub-agents, handoffs), each linked to its page.
    agents: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Row:
    field: str
    cells: list[Cell]

    @property
    def changed(self) -> bool:
        return any(cell.changed for cell in self.cells)


@dataclass(slots=True)
class Comparison:
    """Versions side by side: `versions` the columns, newest first; `rows` one per field."""

    versions: list[AgentVersion] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)


def _names(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "—"


def _number(value: int, unit: str = "") -> str:
    return f"{value}{unit}" if value else "—"


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _client_tools(tools: Sequence[ClientTool]) -> str:
    if not tools:
        return "—"
    return "\n\n".join(
        f"{t.name}: {t.description}\n{json.dumps(t.parameters_schema, indent=2, sort_keys=True)}"
        for t in tools
    )


def _metadata(text: str) -> str:
    if not text:
        return "—"
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


def _response_format(d: AgentDefinition) -> str:
    f = d.response_format
    if f is None:
        return "—"
    return f"{f.name}\n{json.dumps(f.schema, indent=2, ensure_ascii=False, sort_keys=True)}"


def _reasoning(d: AgentDefinition) -> str:
    r = d.reasoning
    if r is None:
        return "—"
    parts = [f"effort {r.effort}" if r.effort else "", _thinking(r.budget_tokens)]
    return ", ".join(p for p in parts if p) or "the provider's default"


def _thinking(budget: int) -> str:
    return f"thinking budget {budget} tokens" if budget else ""


def _max_cost(d: AgentDefinition) -> str:
    cost = d.budget.max_cost
    return "—" if cost is None else format(cost, "f")


# The rows, in the order the page shows them: (field, its text in one definition).
FIELDS: list[tuple[str, Callable[[AgentDefinition], str]]] = [
    ("description", lambda d: d.description or "—"),
    ("instructions", lambda d: d.instructions or "—"),
    ("provider", lambda d: d.provider or "—"),
    ("model", lambda d: d.model or "—"),
    ("tools", lambda d: _names(d.tools)),
    ("tool choice", lambda d: str(d.tool_choice)),
    ("client tools", lambda d: _client_tools(d.waits.client_tools)),
    ("approval required", lambda d: _names(d.waits.approval_required_tools)),
    ("approve side effects", lambda d: _yes(d.waits.approve_side_effects)),
    ("approval timeout", lambda d: _number(d.waits.approval_timeout_s, " s")),
    ("client tool timeout", lambda d: _number(d.waits.client_tool_timeout_s, " s")),
    ("max tokens", lambda d: _number(d.budget.max_tokens)),
    ("max tool calls", lambda d: _number(d.budget.max_tool_calls)),
    ("max wall time", lambda d: _number(d.budget.max_wall_seconds, " s")),
    ("max cost", _max_cost),
    ("response format", _response_format),
    ("reasoning", _reasoning),
    ("max iterations", lambda d: _number(d.max_iterations)),
    ("metadata", lambda d: _metadata(d.metadata)),
    ("sub-agents allowed (spawn_agent)", lambda d: _yes(d.allow_sub_agents)),
    ("sub-agents", lambda d: _names(d.sub_agents)),
    ("handoffs", lambda d: _names(d.handoffs)),
]
_NAMING = {"sub-agents": lambda d: d.sub_agents, "handoffs": lambda d: d.handoffs}


def compare(versions: Sequence[AgentVersion], before: AgentVersion | None = None) -> Comparison:
    """`versions` (newest first) side by side; `before`: the version before the oldest shown
    (its cells are compared with it), None when the oldest shown is the first."""
    columns = list(versions)
    rows = []
    for name, text_of in FIELDS:
        texts = [_clip(text_of(v.definition)) for v in columns]
        older = [*texts[1:], _clip(text_of(before.definition)) if before else None]
        named = _NAMING.get(name)
        cells = [
            Cell(
                text,
                changed=previous is not None and text != previous,
                agents=tuple(named(v.definition)) if named else (),
            )
            for v, text, previous in zip(columns, texts, older, strict=True)
        ]
        rows.append(Row(name, cells))
    return Comparison(columns, rows)


def _clip(text: str) -> str:
    if len(text) <= MAX_CELL_CHARS:
        return text
    return f"{text[:MAX_CELL_CHARS]}… ({len(text) - MAX_CELL_CHARS} more characters)"


def aliases_of(aliases: dict[str, int]) -> dict[int, list[str]]:
    """The aliases pointing at each version, by version, each list sorted."""
    by_version: dict[int, list[str]] = {}
    for alias, version in sorted(aliases.items()):
        by_version.setdefault(version, []).append(alias)
    return by_version


def handed_to(run: Run) -> tuple[str, int] | None:
    """The agent a run is under after a handoff, and its version for the run (0: not
    pinned); None while it is under its own agent, or of no stored agent."""
    if run.agent is None or not run.current_agent or run.current_agent == run.agent.name:
        return None
    return run.current_agent, run.agent.pinned(run.current_agent)
