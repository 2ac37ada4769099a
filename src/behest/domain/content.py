"""Content parts of a user's message: text, images (by URL or inline bytes), files.

A part with bytes is named by its digest ("sha256:<hex>") and size; what behest shows of a
part (events, transcripts listed) is its `reference()`, never the bytes.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace


class PartKind(enum.StrEnum):
    TEXT = "text"
    IMAGE = "image"
    FILE = "file"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContentPart:
    """One part of a message; `data` is b"" for text, URL images and references."""

    kind: PartKind
    text: str = ""
    media_type: str = ""
    url: str = ""
    data: bytes = b""
    filename: str = ""
    digest: str = ""
    size: int = 0

    @classmethod
    def text_part(cls, text: str) -> ContentPart:
        return cls(kind=PartKind.TEXT, text=text)

    @classmethod
    def inline(
        cls, kind: PartKind, media_type: str, data: bytes, *, filename: str = ""
    ) -> ContentPart:
        """An image or file given as bytes, with its digest and size."""
        return cls(
            kind=kind,
            media_type=media_type,
            data=data,
            filename=filename,
            digest=digest_of(data),
            size=len(data),
        )

    @property
    def is_inline(self) -> bool:
        return bool(self.digest)

    def reference(self) -> ContentPart:
        """The part without its bytes (what events and listings carry)."""
        return replace(self, data=b"") if self.data else self

    def describe(self) -> str:
        """One line naming the part, e.g. "image image/png sha256:… (1234 bytes)"."""
        if self.kind == PartKind.TEXT:
            return f"text ({len(self.text)} characters)"
        where = self.url or f"{self.digest} ({self.size} bytes)"
        name = f" {self.filename}" if self.filename else ""
        return f"{self.kind.value} {self.media_type or '?'}{name} {where}"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def joined_text(parts: tuple[ContentPart, ...]) -> str:
    """The text parts of a message, joined by blank lines (its `text`)."""
    return "\n\n".join(p.text for p in parts if p.kind == PartKind.TEXT and p.text)
