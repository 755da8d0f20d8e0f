"""The MCP Python SDK tutorial shape, on the high-level MCPServer (mcp 2.x).

config://settings (JSON), greeting://{name}, user://{id}, and an `add` tool; stdio.
Plus files://docs/{name}/meta and files://raw/{+path}, which answer with the value the
SDK extracted and percent-decoded (JSON), so a test can check that a value reaches the
server exactly as given. The SDK's path-traversal checks are off for them: the test
sends `../etc/passwd` on purpose, to see it arrive as one value.
"""
import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.resources.templates import ResourceSecurity

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


@mcp.resource(
    "files://docs/{name}/meta",
    mime_type="application/json",
    security=ResourceSecurity(exempt_params={"name"}),
)
def file_meta(name: str) -> str:
    """The value received for {name}."""
    return json.dumps({"name": name})


@mcp.resource(
    "files://raw/{+path}",
    mime_type="application/json",
    security=ResourceSecurity(exempt_params={"path"}),
)
def file_raw(path: str) -> str:
    """The value received for {+path}."""
    return json.dumps({"path": path})


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    mcp.run(transport="stdio")
