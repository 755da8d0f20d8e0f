"""A low-level MCP Python SDK server that pages its resource list: 5 resources, 2 per
page, with opaque cursors; stdio."""
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

RESOURCES = [
    types.Resource(uri=f"paged://item/{i}", name=f"item-{i}", mime_type="text/plain") for i in range(5)
]
PAGE = 2


async def list_resources(ctx, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    start = int(params.cursor.removeprefix("page-")) if params and params.cursor else 0
    end = start + PAGE
    nxt = f"page-{end}" if end < len(RESOURCES) else None
    return types.ListResourcesResult(resources=RESOURCES[start:end], next_cursor=nxt)


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=f"contents of {uri}")]
    )


server = Server("paged", on_list_resources=list_resources, on_read_resource=read_resource)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
