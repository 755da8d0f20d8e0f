"""The MCP Python SDK tutorial shape, on the high-level MCPServer (mcp 2.x).

config://settings (JSON), greeting://{name}, user://{id}, and an `add` tool; stdio.
"""
import json

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="tutorial", log_level="WARNING")

SETTINGS = {"theme": "dark", "language": "en", "features": {"beta": False, "max_upload_mb": 25}}


@mcp.resource("config://settings", mime_type="application/json")
def get_settings() -> str:
    """Application settings."""
    return json.dumps(SETTINGS)


@mcp.resource("greeting://{name}")
def get_greeting(name: str) -> str:
    """A personalized greeting."""
    return f"Hello, {name}!"


@mcp.resource("user://{id}")
def get_user(id: str) -> str:  # noqa: A002 - the tutorial's argument name
    """A user profile."""
    return json.dumps({"id": id, "name": f"User {id}", "plan": "pro"})


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    mcp.run(transport="stdio")
