"""A low-level MCP Python SDK server with the awkward contents a host must handle:
a 2 MB markdown document (one answer in its middle), a 4000x3000 PNG, a PNG whose
header claims 100000x100000 pixels, a PDF blob, blobs without a MIME type (UTF-8 text
and random bytes), a blob that is not valid base64, a user-only resource and three
resources with priorities 1.0, 0.5 and 0.1. Two tools: `export_handbook` (read-only)
returns the 2 MB document, `archive_notes` has no annotations; both schemas carry
`$schema`, as servers built with zod-to-json-schema send. stdio."""
import base64
import random
import struct
import zlib

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NEEDLE = (
    "## Visitor parking\n\n"
    "Visitors park in lot Q7 behind the greenhouse. The barrier opens with gate code 4417; "
    "the code changes on the first Monday of every quarter.\n\n"
)


def big_doc() -> str:
    rng = random.Random(7)
    words = ("pipeline stage runner resource context token budget server client template "
             "subscription cache chunk summary policy audit conversation message binding "
             "latency throughput memory retry timeout session transport protocol").split()
    parts, size, sec = [], 0, 0
    while size < 2_000_000:
        sec += 1
        part = f"## Section {sec}\n\n" + " ".join(rng.choice(words) for _ in range(120)) + ".\n\n"
        parts.append(part)
        size += len(part)
    parts.insert(len(parts) // 2, NEEDLE)
    return "# Operations handbook\n\n" + "".join(parts)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(width: int, height: int, rows: bytes) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(rows, 1)) + png_chunk(b"IEND", b"")


def large_png() -> bytes:
    row = b"\x00" + bytes([40, 120, 200]) * 4000
    return png(4000, 3000, row * 3000)


def bomb_png() -> bytes:
    # A header claiming 100000x100000 pixels over a few bytes of data.
    return png(100_000, 100_000, b"\x00" * 64)


def text_doc(title: str, n: int) -> str:
    return f"# {title}\n\n" + " ".join(f"{title.lower()} fact {i}." for i in range(n))


DOCS = {
    "doc://p1": ("must", text_doc("Must", 60), 1.0),
    "doc://p05": ("maybe", text_doc("Maybe", 200), 0.5),
    "doc://p01": ("rarely", text_doc("Rarely", 200), 0.1),
}
BIG = big_doc()
B64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
BLOBS = {}


def blobs() -> dict:
    if not BLOBS:
        BLOBS.update({
            "img://large.png": ("image/png", B64(large_png())),
            "img://bomb.png": ("image/png", B64(bomb_png())),
            "blob://report.pdf": ("application/pdf", B64(b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n")),
            "blob://notes": (None, B64("Meeting notes: ship on Tuesday, café at 10.".encode())),
            "blob://random": (None, B64(bytes(random.Random(3).getrandbits(8) | 0x80 for _ in range(512)))),
            "blob://broken": ("application/octet-stream", "this is not base64!!"),
        })
    return BLOBS


RESOURCES = [
    types.Resource(uri="big://handbook.md", name="handbook", mime_type="text/markdown", size=len(BIG.encode())),
    types.Resource(uri="img://large.png", name="large", mime_type="image/png", description="A wide photo"),
    types.Resource(uri="img://bomb.png", name="bomb", mime_type="image/png"),
    types.Resource(uri="blob://report.pdf", name="report", mime_type="application/pdf", description="Quarterly report"),
    types.Resource(uri="blob://notes", name="notes"),
    types.Resource(uri="blob://random", name="random"),
    types.Resource(uri="blob://broken", name="broken"),
    types.Resource(uri="doc://private", name="private", mime_type="text/plain",
                   annotations=types.Annotations(audience=["user"])),
] + [
    types.Resource(uri=uri, name=name, mime_type="text/markdown", annotations=types.Annotations(priority=p))
    for uri, (name, _, p) in DOCS.items()
]


async def list_resources(ctx, params) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri == "big://handbook.md":
        contents = [types.TextResourceContents(uri=uri, mime_type="text/markdown", text=BIG)]
    elif uri == "doc://private":
        contents = [types.TextResourceContents(uri=uri, mime_type="text/plain", text="salary table")]
    elif uri in DOCS:
        contents = [types.TextResourceContents(uri=uri, mime_type="text/markdown", text=DOCS[uri][1])]
    elif uri in blobs():
        mime, blob = blobs()[uri]
        contents = [types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob)]
    else:
        raise ValueError(f"unknown resource {uri}")
    return types.ReadResourceResult(contents=contents)


SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}}
TOOLS = [
    types.Tool(name="export_handbook", description="The whole staff handbook as text.",
               input_schema=SCHEMA, annotations=types.ToolAnnotations(read_only_hint=True)),
    types.Tool(name="archive_notes", description="Archives the notes.", input_schema=SCHEMA),
]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "export_handbook":
        text = BIG
    elif params.name == "archive_notes":
        text = "archived 3 notes"
    else:
        raise ValueError(f"unknown tool {params.name}")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("content", on_list_resources=list_resources, on_read_resource=read_resource,
                on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
