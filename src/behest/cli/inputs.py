"""`behest run`'s options for what a run is given beside its text: --attach (images, PDFs,
text files), --image-url, --response-format (structured output), --reasoning-effort and
--thinking-budget."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from behest.cli.waits import UsageError
from behest.client import (
    BusyPolicy,
    ImagePart,
    Reasoning,
    ResponseFormat,
    RunOptions,
    attachment,
)


def add_run_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="PATH",
        help="send an image, PDF or text file with the input (repeatable)",
    )
    run.add_argument(
        "--image-url", action="append", default=[], metavar="URL", help="an https image URL"
    )
    run.add_argument(
        "--response-format",
        metavar="SCHEMA",
        help="the final answer must validate against this JSON Schema (JSON text or @FILE)",
    )
    run.add_argument(
        "--response-format-name", default="", metavar="NAME", help="its name (final_answer)"
    )
    run.add_argument("--reasoning-effort", choices=("low", "medium", "high"))
    run.add_argument(
        "--thinking-budget", type=int, default=0, metavar="TOKENS", help="at least 1024"
    )


def run_options(args: argparse.Namespace, waits: dict[str, Any]) -> RunOptions:
    """The run's options of `behest run`'s arguments and `waits`; UsageError names a bad one."""
    try:
        content: list[Any] = [attachment(Path(path)) for path in args.attach]
    except (OSError, ValueError) as exc:
        raise UsageError(f"--attach: {exc}") from None
    content += [ImagePart(url=url) for url in args.image_url]
    response_format = reasoning = None
    if args.response_format:
        schema = _schema(args.response_format)
        response_format = ResponseFormat(schema, name=args.response_format_name)
    if args.reasoning_effort or args.thinking_budget:
        reasoning = Reasoning(args.reasoning_effort or "", args.thinking_budget)
    return RunOptions(
        session_id=args.session,
        on_busy=BusyPolicy[getattr(args, "on_busy", "reject").upper()],
        agent=args.agent,
        provider=args.provider,
        model=args.model,
        metadata=args.metadata,
        tool_choice=args.tool_choice,
        content=tuple(content),
        response_format=response_format,
        reasoning=reasoning,
        **waits,
    )


def _schema(value: str) -> str:
    try:
        text = Path(value[1:]).read_text() if value.startswith("@") else value
    except OSError as exc:
        raise UsageError(f"--response-format: {exc}") from None
    try:
        json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--response-format: the JSON text is not valid ({exc})") from None
    return text
