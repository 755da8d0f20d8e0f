"""A server that speaks only MCP 2026-07-28, on the official SDK's MCPServer (mcp 2.x).

The SDK's servers answer both eras by default; this one refuses `initialize`, as a
modern-only server (the Go SDK's, or any server pinned to 2026-07-28) does:
- stdio: it serves the SDK's 2026-07-28 loop alone (`mcp.server.runner`), which answers
  `initialize` with an error naming the versions it serves;
- `--http PORT`: streamable HTTP on 127.0.0.1:PORT/mcp, where a request without a
  2026-07-28 `MCP-Protocol-Version` header (an `initialize`) gets 400 and JSON-RPC
  error -32022 naming the supported versions (spec 2026-07-28, "Versioning").

What it serves, for hostpipe's era tests:
- modern://counter: "count N", N bumped by the `bump` tool, which then publishes
  notifications/resources/updated for it to `subscriptions/listen` streams;
- modern://echo/{word}: a template;
- the `greet` prompt (argument `name`).
"""
import json
import sys

import anyio
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.runner import _serve_modern_stream
from mcp.server.stdio import stdio_server

MODERN = "2026-07-28"

mcp = MCPServer(
    name="modern-only",
    log_level="WARNING",
    # Reads and lists stay fresh for a minute, so that an update must invalidate them.
    cache_hints={"resources/read": CacheHint(ttl_ms=60_000), "resources/list": CacheHint(ttl_ms=60_000)},
)
count = 0


@mcp.resource("modern://counter", mime_type="text/plain")
def counter() -> str:
    """The counter, as text."""
    return f"count {count}"


@mcp.resource("modern://echo/{word}", mime_type="text/plain")
def echo(word: str) -> str:
    """Says `word` back."""
    return f"echo {word}"


@mcp.prompt()
def greet(name: str) -> str:
    """A greeting for `name`."""
    return f"Hello, {name}!"


@mcp.tool()
async def bump(ctx: Context) -> str:
    """Adds one to the counter and says modern://counter changed."""
    global count
    count += 1
    await ctx.notify_resource_updated("modern://counter")
    return f"count {count}"


def modern_only(app):
    """ASGI middleware: 400 and -32022 for anything not 2026-07-28."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if headers.get(b"mcp-protocol-version", b"").decode("latin-1") != MODERN:
                body = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32022,
                            "message": f"Unsupported protocol version; this server speaks {MODERN} only",
                            "data": {"supported": [MODERN]},
                        },
                    }
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def serve_stdio():
    server = mcp._lowlevel_server
    async with server.lifespan(server) as state:
        async with stdio_server() as (read_stream, write_stream):
            await _serve_modern_stream(
                server, read_stream, write_stream, lifespan_state=state, raise_exceptions=False
            )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        app = mcp.streamable_http_app()
        # The SDK's app runs its session manager in its lifespan; keep it, guard requests.
        guarded = modern_only(app)

        async def asgi(scope, receive, send):
            if scope["type"] == "lifespan":
                await app(scope, receive, send)
            else:
                await guarded(scope, receive, send)

        uvicorn.run(asgi, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        anyio.run(serve_stdio)
