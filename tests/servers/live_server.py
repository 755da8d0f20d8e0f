"""A server whose resources change and misbehave, on the official SDK's MCPServer (mcp 2.x).

For hostpipe's live-resource tests:
- live://static/0 .. live://static/4: five small text resources;
- the `add_note` tool adds live://note/{name} and sends notifications/resources/list_changed;
- live://sleep/{ms}: answers after `ms` milliseconds;
- live://big/{size}: `size` bytes of text (to cross a message-size limit);
- the `crash` tool ends the process at once, as a crash would.

stdio by default; `--http PORT` serves streamable HTTP on 127.0.0.1:PORT/mcp.
"""
import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import TextResource

mcp = MCPServer(name="live", log_level="WARNING")

for i in range(5):
    mcp.add_resource(
        TextResource(
            uri=f"live://static/{i}",
            name=f"static-{i}",
            text=f"Static resource {i}: the meeting room code is {1000 + i}.",
            mime_type="text/plain",
        )
    )


@mcp.tool()
async def add_note(name: str, ctx: Context) -> str:
    """Add live://note/{name} and announce the new list."""
    mcp.add_resource(
        TextResource(uri=f"live://note/{name}", name=f"note-{name}", text=f"Note {name}.", mime_type="text/plain")
    )
    # Both eras: the session's notification reaches 2025-11-25 clients, the event bus the
    # `subscriptions/listen` streams of 2026-07-28 ones.
    await ctx.session.send_resource_list_changed()
    await ctx.notify_resources_changed()
    return f"added live://note/{name}"


@mcp.resource("live://sleep/{ms}")
async def sleep(ms: str) -> str:
    """Answers after `ms` milliseconds."""
    await asyncio.sleep(int(ms) / 1000)
    return f"slept {ms} ms"


@mcp.resource("live://big/{size}")
def big(size: str) -> str:
    """`size` bytes of text."""
    return "x" * int(size)


@mcp.tool()
def crash() -> str:
    """Ends the process without a word, as a crash would."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        mcp.run(transport="stdio")
