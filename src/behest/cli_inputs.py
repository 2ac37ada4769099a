"""`behest run`'s options for what a run is given beside its text: --attach (images, PDFs,
text files), --image-url, --response-format (structured output), --reasoning-effort and
--thinking-budget."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from behest._proto.agent.v1 import run_pb2
from behest.cli_waits import UsageError
from behest.client_inputs import RunOptions, attachment, image_url
from behest.client_waits import WaitOptions


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


def run_options(args: argparse.Namespace, waits: WaitOptions) -> RunOptions:
    """`waits` and the options of `behest run`'s arguments; UsageError names a bad one."""
    options = RunOptions(**waits)
    try:
        content = [attachment(Path(path)) for path in args.attach]
    except (OSError, ValueError) as exc:
        raise UsageError(f"--attach: {exc}") from None
    content += [image_url(url) for url in args.image_url]
    if content:
        options["content"] = content
    if args.response_format:
        options["response_format"] = run_pb2.ResponseFormat(
            name=args.response_format_name, json_schema=_schema(args.response_format)
        )
    if args.reasoning_effort or args.thinking_budget:
        options["reasoning"] = run_pb2.Reasoning(
            effort=args.reasoning_effort or "", budget_tokens=args.thinking_budget
        )
    return options


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
