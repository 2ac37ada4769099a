"""MCP sampling: a server's request for a model's answer during a tool call, answered by the
calling run's own provider and model.

behest advertises sampling (without tools) to every server whose settings allow it (its
`sampling`, and the setting mcp_sampling; a server it is not advertised to that asks anyway
gets the SDK's "Sampling not supported"). A server's `sampling/createMessage` is put to the
ToolContext of the call that asked, found as a question's asker is (tools/mcp_elicit.py
InFlight: the call in whose task the SDK answers a SEP-2322 input-required result, else the
server's one call in flight); the run answers with one model call (runs/sampling.py), its
tokens counted in the run's usage and budgets. Text only: a request with images, audio or
tools is refused, saying why. The server's model preferences, temperature, stop sequences and
includeContext are not followed: the run's model is the run's.
"""

from __future__ import annotations

from mcp.client.session import ClientRequestContext, SamplingFnT
from mcp.types import (
    INVALID_REQUEST,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ErrorData,
    TextContent,
)

from behest.tools.mcp_elicit import InFlight
from behest.tools.sampling import SampledTurn, SamplingRefused, SamplingRequest


def sampling_callback(in_flight: InFlight) -> SamplingFnT:
    """The SDK's callback for a server's sampling requests: each answered by the asking
    call's run."""

    async def sample(
        context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        caller = in_flight.asker()
        if isinstance(caller, ErrorData):
            return caller
        try:
            reply = await caller.sample(request_of(params))
        except (SamplingRefused, RuntimeError) as exc:
            return ErrorData(code=INVALID_REQUEST, message=str(exc))
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=reply.text),
            model=reply.model,
            stop_reason=reply.stop_reason,
        )

    return sample


def request_of(params: CreateMessageRequestParams) -> SamplingRequest:
    """A server's sampling request as behest answers it (SamplingRefused: one it does not)."""
    if params.tools:
        raise SamplingRefused("behest samples without tools: the request offers some")
    turns = []
    for message in params.messages:
        texts = []
        for block in message.content_as_list:
            if not isinstance(block, TextContent):
                raise SamplingRefused(
                    f"behest samples text only: a message holds {block.type} content"
                )
            texts.append(block.text)
        turns.append(SampledTurn(message.role, _plain("\n".join(texts))))
    return SamplingRequest(
        turns=tuple(turns),
        system_prompt=_plain(params.system_prompt or ""),
        max_tokens=params.max_tokens,
    ).checked()


def _plain(text: str) -> str:
    """Text a provider can send: a lone surrogate (from a JSON escape) becomes U+FFFD."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
