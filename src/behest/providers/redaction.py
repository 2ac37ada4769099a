"""The one way a provider's words reach a client: one line, bounded, and never its API key.

A provider's error message may echo the key (OpenAI quotes part of it on a 401, a proxy may
echo a whole header); every adapter passes such text through `redacted` before it goes into
an error, an event or a log line.
"""

from __future__ import annotations

MASK = "[redacted]"
MAX_CHARS = 200


def redacted(text: str, secret: str, *, limit: int = MAX_CHARS) -> str:
    """`text` on one line, at most `limit` characters, with every copy of `secret` masked."""
    if secret:
        text = text.replace(secret, MASK)
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
