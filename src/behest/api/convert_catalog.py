"""proto ⇄ domain for the catalog (ListTools, ListProviders): what a tool is and does, and
what each provider offers — never an API key (convert.py has the runs' shapes)."""

from __future__ import annotations

import json
from decimal import Decimal

from behest._proto.agent.v1 import catalog_pb2 as pb_catalog
from behest._proto.agent.v1 import common_pb2 as pb_common
from behest.api.convert import decimal_text
from behest.domain import catalog


def tool_info(value: catalog.ToolInfo) -> pb_catalog.ToolInfo:
    return pb_catalog.ToolInfo(
        spec=pb_common.ToolSpec(
            name=value.name,
            description=value.description,
            parameters_schema=json.dumps(value.parameters_schema, separators=(",", ":")),
        ),
        source=value.source,
        read_only=value.read_only,
        concurrency_safe=value.concurrency_safe,
        idempotent=value.idempotent,
        requires_approval=value.requires_approval,
        timeout_s=value.timeout_s,
        workers=value.workers,
        unsupported=value.unsupported,
        unavailable_reason=value.unavailable_reason,
    )


def provider_info(value: catalog.ProviderInfo) -> pb_catalog.ProviderInfo:
    """A provider as ListProviders shows it: there is no field an API key could go in."""
    return pb_catalog.ProviderInfo(
        id=pb_common.ProviderId(value=value.name),
        type=value.type,
        base_url=value.base_url,
        default_model=value.default_model,
        models=[_model_info(m) for m in value.models],
    )


def _model_info(value: catalog.ModelInfo) -> pb_catalog.ModelInfo:
    """A model's limits and prices per million tokens (cached and cache-write prices default
    to the input price, as costs are counted)."""
    out = pb_catalog.ModelInfo(
        name=pb_common.ModelName(value=value.name),
        context_window=value.context_window,
        max_output_tokens=value.max_output_tokens,
        input_media=value.input_media,
    )
    prices = value.prices
    if prices is not None:
        out.input_price = decimal_text(prices.input)
        out.output_price = decimal_text(prices.output)
        out.cached_input_price = decimal_text(_or(prices.cached_input, prices.input))
        out.cache_write_price = decimal_text(_or(prices.cache_write, prices.input))
        out.currency = prices.currency
    return out


def _or(value: Decimal | None, default: Decimal) -> Decimal:
    return default if value is None else value
