"""An MCP server on the official SDK's MCPServer (mcp 2.x) that first writes a banner
on stdout without a newline, as some servers do ("Server running on stdio"), so that
it is glued to the first MCP message; then it serves one resource, banner://hello.
stdio.
"""
import sys

sys.stdout.write("Starting banner-server v1.2 ... ")
sys.stdout.flush()

from mcp.server.mcpserver import MCPServer  # noqa: E402

mcp = MCPServer(name="banner", log_level="WARNING")


@mcp.resource("banner://hello", name="hello", mime_type="text/plain")
def hello() -> str:
    return "hello from behind the banner"


if __name__ == "__main__":
    mcp.run(transport="stdio")
