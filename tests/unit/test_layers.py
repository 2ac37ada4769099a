"""Imports point downward, checked: every module's imports (read with ast, type-checking
and function-level ones included) against the layer list of docs/ARCHITECTURE.md."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src"
ARCHITECTURE = Path(__file__).parents[2] / "docs" / "ARCHITECTURE.md"
ROOT = "behest"


def layers_and_rules() -> tuple[list[list[str]], list[str]]:
    """The layers (top first) and the extra rules, from ARCHITECTURE.md's Layers section."""
    section = ARCHITECTURE.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, re.S)
    layers = [line.split() for line in blocks[0].splitlines() if line.strip()]
    rules = [line for line in blocks[1].splitlines() if line.strip()]
    return layers, rules


def modules(src: Path = SRC) -> dict[str, Path]:
    """Every module of the package but the generated code and the migrations."""
    found = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        if "_proto" in parts or "migrations" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(path: Path, known: set[str]) -> Iterator[str]:
    """The behest modules (or generated stubs) a module imports, anywhere in it."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for name in candidates:
            if name in known or name.startswith(f"{ROOT}._proto"):
                yield name
                break


def graph(src: Path = SRC) -> dict[str, set[str]]:
    found = modules(src)
    known = set(found)
    return {
        name: {target for target in imports_of(path, known) if target != name}
        for name, path in found.items()
        if name != ROOT  # the package face is only imported
    }


def unit_of(module: str, units: list[str]) -> str | None:
    """The layer name a module belongs to: the longest that is it or a package above it."""
    # The root package stands for itself alone, not for everything under it.
    matching = [u for u in units if module == u or (u != ROOT and module.startswith(f"{u}."))]
    return max(matching, key=len) if matching else None


def problems(edges: dict[str, set[str]]) -> list[str]:
    layers, rules = layers_and_rules()
    rank = {unit: index for index, line in enumerate(layers) for unit in line}
    units = list(rank)
    found = []
    for module, targets in sorted(edges.items()):
        mine = unit_of(module, units)
        if mine is None:
            found.append(f"{module} is in no layer of ARCHITECTURE.md")
            continue
        for target in sorted(targets):
            theirs = unit_of(target, units) if not target.startswith(f"{ROOT}._proto") else None
            if theirs is None or theirs == mine:
                continue
            if rank[theirs] < rank[mine]:
                found.append(f"{module} imports {target}, a layer above it ({theirs})")
            elif rank[theirs] == rank[mine]:
                found.append(f"{module} imports {target}, beside it on one layer ({theirs})")
    found.extend(_broken_rules(edges, rules))
    found.extend(f"import circle: {' → '.join(c)}" for c in circles(edges))
    return found


def _broken_rules(edges: dict[str, set[str]], rules: list[str]) -> Iterator[str]:
    for rule in rules:
        if " imports only: " in rule:
            who, allowed = rule.split(" imports only: ")
            for module, targets in edges.items():
                if unit_of(module, [who]) is None:
                    continue
                for target in targets:
                    if not any(unit_of(target, [a]) for a in [who, *allowed.split()]):
                        yield f"{module} imports {target}: {who} imports only {allowed}"
        elif " is imported only by: " in rule:
            what, importers = rule.split(" is imported only by: ")
            for module, targets in edges.items():
                if any(unit_of(module, [i]) for i in importers.split()):
                    continue
                for target in sorted(t for t in targets if unit_of(t, [what])):
                    yield f"{module} imports {target}, which only {importers} may"


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (strongly connected groups of two or more), each in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_imports_point_downward_with_no_circle() -> None:
    assert problems(graph()) == []


@pytest.mark.parametrize(
    ("module", "target", "words"),
    [
        ("behest.store.sql.rows", "behest.events.log", "a layer above it"),
        ("behest.tools.registry", "behest.providers.base", "beside it on one layer"),
        ("behest.runs.loop", "behest._proto.agent.v1.run_pb2", "which only"),
        ("behest.client", "behest.domain.events", "imports only"),
    ],
)
def test_an_upward_or_sideways_edge_is_named(module: str, target: str, words: str) -> None:
    edges = graph()
    edges.setdefault(module, set()).add(target)
    assert any(f"{module} imports {target}" in p and words in p for p in problems(edges))


def test_a_circle_is_named() -> None:
    edges = graph()
    edges["behest.domain.spend"].add("behest.domain.runs")  # runs imports spend
    assert "import circle: behest.domain.runs → behest.domain.spend" in problems(edges)
