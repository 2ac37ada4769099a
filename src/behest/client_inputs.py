"""What a run is given beside its input text, client side: images and files (content parts),
a response format (structured output) and a reasoning setting, as keyword arguments of
BehestClient.create_run and stream_run (RunOptions); `behest run`'s options: cli_inputs.py."""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from pathlib import Path

from behest._proto.agent.v1 import common_pb2, run_pb2
from behest.client_waits import WaitOptions


class RunOptions(WaitOptions, total=False):
    """A run's options beside its text: those of WaitOptions, and these."""

    # Images and files after the input: see image_file, image_url, file_part.
    content: Sequence[common_pb2.ContentPart]
    # The final answer must be JSON that validates against this (structured output).
    response_format: run_pb2.ResponseFormat
    # How much the model should reason.
    reasoning: run_pb2.Reasoning


def fill(request: run_pb2.CreateRunRequest, options: RunOptions) -> None:
    """Set the request's content, response format and reasoning from `options`."""
    request.content.extend(options.get("content", ()))
    if "response_format" in options:
        request.response_format.CopyFrom(options["response_format"])
    if "reasoning" in options:
        request.reasoning.CopyFrom(options["reasoning"])


def attachment(path: Path) -> common_pb2.ContentPart:
    """A file as a content part: an image (by its media type, guessed from its name) or a
    file (PDF, text); ValueError for a type that is neither."""
    media_type = mimetypes.guess_type(path.name)[0] or ""
    data = path.read_bytes()
    if media_type.startswith("image/"):
        return common_pb2.ContentPart(
            image=common_pb2.ImageContent(mime_type=media_type, data=data)
        )
    if media_type in ("application/pdf", "text/plain"):
        file = common_pb2.FileContent(mime_type=media_type, data=data, filename=path.name)
        return common_pb2.ContentPart(file=file)
    raise ValueError(
        f"{path.name}: attach images, PDFs or .txt files (its type: {media_type or 'unknown'})"
    )


def image_url(url: str) -> common_pb2.ContentPart:
    return common_pb2.ContentPart(image=common_pb2.ImageContent(url=url))
