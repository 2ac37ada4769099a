"""A tool as a worker declares it: the JSON Schema of its parameters from the function's type
hints (a pydantic model made of the signature), its description from the docstring, the
parameter, if any, that takes the task's context, and its check (`verify`), if any: which of
the tool's parameters it takes, and its own context's parameter."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from behest.worker._context import TaskContext

# The server's rule for tool names (what a model may call).
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """A tool's check: its function, and what it is called with of the tool's checked
    arguments (by their parameters' names: `positional` by position, `keywords` by name) and
    the parameter that takes the context (None: none does)."""

    function: Callable[..., Any]
    is_async: bool = False
    positional: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    context_parameter: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerTool:
    """A tool a worker serves: what its hello declares, and how to call its function.

    `parameters_schema` is the JSON Schema the model's arguments must fit (an object schema,
    draft 2020-12, local `$ref`s only); `context_parameter` names the parameter that receives
    the TaskContext (None: none does). `check` is the tool's `verify`, if it has one: then it
    is `verifiable`, as its hello says.
    """

    name: str
    description: str
    parameters_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    idempotent: bool = False
    read_only: bool = False
    concurrency_safe: bool = False
    requires_approval: bool = False
    timeout_s: float = 30.0
    schedule_timeout_s: float = 60.0
    max_attempts: int = 1
    function: Callable[..., Any] = field(repr=False)
    is_async: bool = field(default=False, repr=False)
    context_parameter: str | None = None
    # The arguments' model: field pN stands for the function's parameter parameters[N].
    arguments_model: type[BaseModel] = field(repr=False)
    parameters: tuple[str, ...] = field(default=(), repr=False)
    positional_only: int = field(default=0, repr=False)
    check: Check | None = field(default=None, repr=False)

    @property
    def verifiable(self) -> bool:
        """Whether the tool has a check: the worker answers `verify` for it."""
        return self.check is not None


class _Schema(GenerateJsonSchema):
    """Pydantic's JSON Schema without the titles it makes up (the model's and each field's)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        made = super().model_schema(schema)
        made.pop("title", None)
        return made


def declare(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    output_schema: Mapping[str, Any] | type | None,
    verify: Callable[..., Any] | None = None,
    **options: Any,
) -> WorkerTool:
    """The declaration of `function` as a tool; TypeError or ValueError when it cannot be."""
    name = name or str(getattr(function, "__name__", ""))
    if not _NAME.match(name):
        raise ValueError(f"tool name {name!r}: use 1 to 64 letters, digits, '_' or '-'")
    _check_options(name, options)
    model, parameters, positional_only, context = _arguments(name, function)
    return WorkerTool(
        name=name,
        description=description if description is not None else inspect.getdoc(function) or "",
        parameters_schema=model.model_json_schema(schema_generator=_Schema),
        output_schema=_output_schema(output_schema),
        function=function,
        is_async=_is_async(function),
        context_parameter=context,
        arguments_model=model,
        parameters=parameters,
        positional_only=positional_only,
        check=None if verify is None else _check(name, verify, parameters),
        **options,
    )


def _check_options(name: str, options: Mapping[str, Any]) -> None:
    for key in ("timeout_s", "schedule_timeout_s"):
        if not options[key] > 0:
            raise ValueError(f"tool {name}: {key} must be more than 0, not {options[key]!r}")
    attempts = options["max_attempts"]
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"tool {name}: max_attempts must be a whole number from 1")


def _arguments(
    name: str, function: Callable[..., Any]
) -> tuple[type[BaseModel], tuple[str, ...], int, str | None]:
    """The arguments' model, the parameters it fills (the function's, in order, the context's
    left out), how many of them are positional-only, and the context's parameter."""
    hints = _hints(name, function)
    fields: dict[str, Any] = {}
    parameters: list[str] = []
    positional_only, context = 0, None
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in _VARIADIC:
            raise TypeError(f"tool {name}: *args and **kwargs have no schema; name each parameter")
        hint = hints.get(parameter.name, Any)
        if _takes_context(name, parameter, hint, context):
            context = parameter.name
            continue
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional_only += 1
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        # Fields under made-up names, the parameters' names as aliases: a parameter may be
        # called `json` or `schema` without shadowing pydantic's own attributes.
        fields[f"p{len(parameters)}"] = (Annotated[hint, Field(alias=parameter.name)], default)
        parameters.append(parameter.name)
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return model, tuple(parameters), positional_only, context


def _check(name: str, verify: Callable[..., Any], parameters: tuple[str, ...]) -> Check:
    """The declaration of a tool's check: it takes some or all of the tool's parameters (by
    their names), and the context if it asks for it as a tool does."""
    who = f"{name}'s check"
    if not callable(verify):
        raise TypeError(f"tool {who}: verify must be a function, not a {type(verify).__name__}")
    hints = _hints(who, verify)
    positional: list[str] = []
    keywords: list[str] = []
    context = None
    for parameter in inspect.signature(verify).parameters.values():
        if parameter.kind in _VARIADIC:
            raise TypeError(f"tool {who}: *args and **kwargs cannot be filled; name each parameter")
        if _takes_context(who, parameter, hints.get(parameter.name, Any), context):
            context = parameter.name
        elif parameter.name not in parameters:
            raise TypeError(f"tool {who}: {parameter.name!r} is not a parameter of the tool")
        elif parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            positional.append(parameter.name)
        else:
            keywords.append(parameter.name)
    return Check(
        function=verify,
        is_async=_is_async(verify),
        positional=tuple(positional),
        keywords=tuple(keywords),
        context_parameter=context,
    )


def _takes_context(who: str, parameter: inspect.Parameter, hint: Any, found: str | None) -> bool:
    """Whether a parameter takes the context (named `context`, or annotated TaskContext);
    TypeError if another one (`found`) does already, or if it is positional-only."""
    if parameter.name != "context" and not _is_context(hint):
        return False
    if found is not None:
        raise TypeError(f"tool {who}: two parameters ask for the context")
    if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
        raise TypeError(f"tool {who}: the context's parameter cannot be positional-only")
    return True


def _hints(name: str, function: Callable[..., Any]) -> dict[str, Any]:
    target = function if inspect.isroutine(function) else getattr(function, "__call__", function)  # noqa: B004
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # a name the annotations use is not importable where they live
        raise TypeError(f"tool {name}: its type hints cannot be read: {exc}") from None


def _is_context(hint: Any) -> bool:
    """Whether a type hint is TaskContext (also in Annotated[…], or `TaskContext | None`)."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    if hint is TaskContext:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return TaskContext in typing.get_args(hint)
    return False


def _is_async(function: Callable[..., Any]) -> bool:
    call = function if inspect.isroutine(function) else getattr(function, "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def _output_schema(given: Mapping[str, Any] | type | None) -> dict[str, Any] | None:
    """A JSON Schema as given, or that of a type (a pydantic model, a dataclass, …)."""
    if given is None:
        return None
    if isinstance(given, Mapping):
        return dict(given)
    return TypeAdapter(given).json_schema(schema_generator=_Schema)
