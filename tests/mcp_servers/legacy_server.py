"""A bare stdio MCP server that speaks only the 2025 initialize handshake, like most servers
in the wild: any method it does not know (such as `server/discover`) is answered with
"method not found". Plain JSON-RPC, no SDK, so the test does not depend on the SDK's server.
"""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": "greet",
        "description": "Greet someone.",
        "inputSchema": {
            "type": "object",
            "properties": {"who": {"type": "string"}},
            "required": ["who"],
        },
        "annotations": {"readOnlyHint": True},
    }
]


def answer(request: dict) -> dict:
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "legacy", "version": "1.0"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call" and params.get("name") == "greet":
        who = params.get("arguments", {}).get("who", "")
        return {"content": [{"type": "text", "text": f"hello, {who}"}], "isError": False}
    raise LookupError(method)


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue  # notifications and responses need no answer
    reply: dict = {"jsonrpc": "2.0", "id": message["id"]}
    try:
        reply["result"] = answer(message)
    except LookupError:
        reply["error"] = {"code": -32601, "message": f"Method not found: {message['method']}"}
    print(json.dumps(reply), flush=True)
