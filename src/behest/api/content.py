"""CreateRunRequest.content: content parts checked (kinds, media types, sizes, URLs) into the
domain's ContentParts. Messages name the part, e.g. `content[2].image.data`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from behest._proto.agent.v1 import common_pb2 as pb_common
from behest.domain.content import ContentPart, PartKind
from behest.errors import InvalidArgument, quote

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
FILE_TYPES = ("application/pdf", "text/plain")
MAX_URL_BYTES = 2048
MAX_FILENAME_BYTES = 255


@dataclass(frozen=True, slots=True)
class ContentLimits:
    """Bounds of a request's content parts (settings max_content_parts, _part_bytes, _bytes);
    text parts count against max_input_bytes with the input."""

    max_parts: int = 16
    max_part_bytes: int = 2 * 1024 * 1024
    max_bytes: int = 3 * 1024 * 1024
    max_text_bytes: int = 256 * 1024


DEFAULT_LIMITS = ContentLimits()


def content_parts(
    parts: Sequence[pb_common.ContentPart], limits: ContentLimits, *, input_bytes: int
) -> tuple[ContentPart, ...]:
    """The request's content parts, checked; INVALID_ARGUMENT names the first bad one."""
    if len(parts) > limits.max_parts:
        raise InvalidArgument(
            f"content has {len(parts)} parts; the limit is {limits.max_parts} (max_content_parts)"
        )
    checked = tuple(_part(part, f"content[{i}]", limits) for i, part in enumerate(parts))
    total = sum(part.size for part in checked)
    if total > limits.max_bytes:
        raise InvalidArgument(
            f"content's images and files are {total} bytes together; the limit is "
            f"{limits.max_bytes} bytes (max_content_bytes)"
        )
    text = input_bytes + sum(len(p.text.encode()) for p in checked)
    if text > limits.max_text_bytes:
        raise InvalidArgument(
            f"input and content's text parts are {text} bytes together; the limit is "
            f"{limits.max_text_bytes} bytes (max_input_bytes)"
        )
    return checked


def _part(part: pb_common.ContentPart, at: str, limits: ContentLimits) -> ContentPart:
    match part.WhichOneof("content"):
        case "text":
            text = part.text.text
            if not text.strip():
                raise InvalidArgument(f"{at}.text.text must not be empty")
            if "\x00" in text:
                raise InvalidArgument(f"{at}.text.text contains a NUL character (\\u0000)")
            return ContentPart.text_part(text)
        case "image":
            return _image(part.image, f"{at}.image", limits)
        case "file":
            return _file(part.file, f"{at}.file", limits)
        case "json":
            raise InvalidArgument(f"{at}: json parts are not taken as input; send text")
    raise InvalidArgument(f"{at} is empty: set text, image or file")


def _image(image: pb_common.ImageContent, at: str, limits: ContentLimits) -> ContentPart:
    if image.url and image.data:
        raise InvalidArgument(f"{at}: set url or data, not both")
    if image.mime_type and image.mime_type not in IMAGE_TYPES:
        raise InvalidArgument(
            f"{at}.mime_type must be one of {', '.join(IMAGE_TYPES)}; got {quote(image.mime_type)}"
        )
    if image.url:
        return ContentPart(kind=PartKind.IMAGE, url=_url(image.url, at), media_type=image.mime_type)
    if not image.mime_type:
        raise InvalidArgument(f"{at}.mime_type is required with data ({', '.join(IMAGE_TYPES)})")
    _bytes(image.data, f"{at}.data", limits)
    return ContentPart.inline(PartKind.IMAGE, image.mime_type, image.data)


def _file(file: pb_common.FileContent, at: str, limits: ContentLimits) -> ContentPart:
    if file.mime_type not in FILE_TYPES:
        raise InvalidArgument(
            f"{at}.mime_type must be one of {', '.join(FILE_TYPES)}; got {quote(file.mime_type)}"
        )
    if len(file.filename.encode()) > MAX_FILENAME_BYTES or any(
        c in file.filename for c in "\x00/\\\n\r"
    ):
        raise InvalidArgument(
            f"{at}.filename must be a plain file name of at most {MAX_FILENAME_BYTES} bytes"
        )
    _bytes(file.data, f"{at}.data", limits)
    if file.mime_type == "text/plain":
        try:
            file.data.decode()
        except UnicodeDecodeError:
            raise InvalidArgument(f"{at}.data: a text/plain file must be UTF-8") from None
    return ContentPart.inline(PartKind.FILE, file.mime_type, file.data, filename=file.filename)


def _bytes(data: bytes, at: str, limits: ContentLimits) -> None:
    if not data:
        raise InvalidArgument(f"{at} is empty")
    if len(data) > limits.max_part_bytes:
        raise InvalidArgument(
            f"{at} is {len(data)} bytes; the limit is {limits.max_part_bytes} bytes a part "
            "(max_content_part_bytes)"
        )


def _url(url: str, at: str) -> str:
    if len(url.encode()) > MAX_URL_BYTES:
        raise InvalidArgument(f"{at}.url is longer than {MAX_URL_BYTES} bytes")
    if not url.startswith("https://") or any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidArgument(f"{at}.url must be an https:// URL; got {quote(url)}")
    return url
