"""Built-in tools, output truncation and the registry's validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from behest.domain.messages import ToolCall
from behest.tools.builtin import builtin_tools, calculator, read_file
from behest.tools.calculator import CalculationError, evaluate, format_value
from behest.tools.output import truncate
from behest.tools.registry import ToolRegistry


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1 + 2", "3"),
        ("0.1 + 0.2", "0.3"),
        ("(1 + 2) / 3", "1"),
        ("1 / 8", "0.125"),
        ("-7 / 4", "-1.75"),
        ("2 ** 64", "18446744073709551616"),
        ("2 ^ 10", "1024"),
        ("7 // 2", "3"),
        ("-3 % 5", "2"),
        ("1 / 3", "1/3 (≈ 0.333333333333333)"),
    ],
)
def test_calculator_is_exact(expression: str, value: str) -> None:
    assert format_value(evaluate(expression)) == value


@pytest.mark.parametrize(
    "expression",
    ["__import__('os').system('true')", "x + 1", "1 / 0", "2 ** 100000", "True + 1", "[1][0]", ""],
)
def test_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(CalculationError):
        evaluate(expression)


async def test_calculator_errors_are_tool_errors() -> None:
    result = await calculator()({"expression": "1/0"})
    assert not isinstance(result, str)
    assert result.is_error
    assert "division by zero" in result.text


async def test_read_file_reads_below_its_root_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("hello")
    (tmp_path / "secret.txt").write_text("nope")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    tool = read_file(root)
    ok = await tool({"path": "notes.txt"})
    assert not isinstance(ok, str) and (ok.text, ok.is_error) == ("hello", False)
    for path in ("../secret.txt", "link.txt", "/etc/passwd", "missing.txt"):
        result = await tool({"path": path})
        assert not isinstance(result, str) and result.is_error, path


def test_read_file_is_off_without_a_root() -> None:
    assert [t.name for t in builtin_tools()] == ["current_time", "calculator"]
    assert "read_file" in [t.name for t in builtin_tools(read_file_root="/tmp")]


def test_truncation_keeps_2000_lines_and_says_so() -> None:
    text = "".join(f"line {i}\n" for i in range(3000))
    cut = truncate(text)
    assert cut.splitlines()[1999] == "line 1999"
    assert "[output truncated: showing 2000 of 3000 lines" in cut.splitlines()[-1]


def test_truncation_keeps_50_kb() -> None:
    cut = truncate("x" * 100_000)
    assert cut.startswith("x" * 51_200)
    assert "51200 of 100000 bytes" in cut


def test_short_output_is_untouched() -> None:
    assert truncate("small\noutput") == "small\noutput"


async def test_registry_validates_arguments_against_the_schema() -> None:
    registry = ToolRegistry(builtin_tools())
    result = await registry.execute(ToolCall("c1", "calculator", '{"expression": 5}'))
    assert result.is_error
    assert "expression" in result.text and "schema" in result.text


def test_registry_refuses_an_invalid_schema_and_duplicate_names() -> None:
    registry = ToolRegistry(builtin_tools())
    with pytest.raises(ValueError, match="two tools"):
        registry.add(calculator())
