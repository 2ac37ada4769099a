"""A settings error in plain words: one line per bad setting, naming where it is (the table
and the key, as the settings file spells them), what is wrong, and the value given unless
it may be a secret."""

from __future__ import annotations

import re
import types
from collections.abc import Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

# A key the settings file may write bare; any other is quoted ("gpt-4.1").
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
# Values that may be secrets: anything under [auth] or [tls] (a secret pasted into the wrong
# key), a provider's api_key_env and api_key_file (the key instead of its variable's name),
# an MCP server's headers, env and args (tokens).
_SECRET_TABLES = ("auth", "tls")
_SECRET_KEYS = {"providers": ("api_key_env", "api_key_file"), "mcp": ("headers", "env", "args")}
# pydantic's words for these, said for a settings file.
_TABLE_TYPES = ("model_type", "dict_type")


def explain(error: ValidationError, source: str | None, root: type[BaseModel]) -> str:
    """One line per bad setting of `root`: where it is, what is wrong, the value given."""
    where = f"{source}: " if source else ""
    lines = []
    for problem in error.errors(include_url=False):
        message = str(problem["msg"]).removeprefix("Value error, ")
        loc = [part for part in problem["loc"] if part != "[key]"]  # a table's name: its key
        if not loc:
            lines.append(f"{where}{message}")
            continue
        # An unknown key, or a value where a table goes, may hold anything: it is not shown.
        hidden = problem["type"] in (*_TABLE_TYPES, "extra_forbidden") or _secret(loc)
        if problem["type"] in _TABLE_TYPES:
            message = "must be a table"
        elif problem["type"] == "extra_forbidden" and len(loc) > 1:
            allowed = _keys_at(root, loc[:-1])
            message = f"{message} (allowed: {', '.join(allowed)})" if allowed else message
        given = problem.get("input")
        shown = "" if isinstance(given, dict) or hidden else f" (got {given!r:.80})"
        lines.append(f"{where}setting {_key(loc)!r}: {message}{shown}")
    return "\n".join(lines)


def _key(loc: Sequence[int | str]) -> str:
    """The setting's name as the file spells it; a number is an item of a list."""
    return ".".join(
        str(part) if isinstance(part, int) or _BARE_KEY.match(part) else f'"{part}"' for part in loc
    )


def _secret(loc: Sequence[int | str]) -> bool:
    head = str(loc[0])
    if head in _SECRET_TABLES:
        return True
    # [providers.NAME] api_key_*; [mcp.servers.NAME] headers, env, args.
    depth = {"providers": 2, "mcp": 3}.get(head)
    return depth is not None and len(loc) > depth and loc[depth] in _SECRET_KEYS[head]


def _keys_at(root: type[BaseModel], path: Sequence[int | str]) -> list[str]:
    """The keys the table at `path` takes (none if it is not a table of settings)."""
    annotation: Any = root
    for part in path:
        annotation = _unwrapped(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return []
            annotation = field.annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]  # `part` is a name: the table of that name
        else:
            return []
    model = _unwrapped(annotation)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def _unwrapped(annotation: Any) -> Any:
    """The type inside `Annotated[T, ...]` and `T | None`."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            kinds = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(kinds) != 1:
                return annotation
            annotation = kinds[0]
        else:
            return annotation
