"""A platform that speaks MCP pointed at hostpipe's MCP door: the official `mcp` Python
SDK's streamable HTTP client with a bearer token, nothing else.

    python mcp_client.py BASE_URL PIPELINE CONVERSATION
        (turn or admin token in $HOSTPIPE_TOKEN, read-only token in $HOSTPIPE_READ_TOKEN)

On BASE_URL/mcp/PIPELINE: lists the tools, calls `fit_context` (once with a
conversation, once with a budget of 0, once with bad arguments, once for another
pipeline), lists the resources, templates and prompts, reads an aggregated resource, a
template expansion, a resource the pipeline's consent policy denies and one of a server
it does not bind, gets a prompt; on BASE_URL/mcp (the default pipeline) lists the
resources and calls `fit_context` without a pipeline and with an unknown one; with the
read-only token lists the tools and calls `fit_context`. Prints one
JSON document of what it saw; the e2e test checks the values.
"""
import asyncio
import json
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def text_of(result):
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


async def session_for(url, token, work):
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60.0)
    ) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await work(session)


async def error_of(call):
    try:
        await call
        return None
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}


async def admin(session, conversation):
    out = {}
    tools = await session.list_tools()
    out["tools"] = [
        {"name": t.name, "input_schema": t.input_schema} for t in tools.tools
    ]
    fitted = await session.call_tool(
        "fit_context",
        {"query": "Which model does the app use?", "conversation": conversation},
    )
    out["fit"] = {
        "is_error": fitted.is_error,
        "text": text_of(fitted),
        "structured": fitted.structured_content,
    }
    empty = await session.call_tool(
        "fit_context", {"query": "Which model does the app use?", "budget": 0}
    )
    out["fit_budget_0"] = {
        "is_error": empty.is_error,
        "text": text_of(empty),
        "structured": empty.structured_content,
    }
    bad = await session.call_tool("fit_context", {"question": "no query"})
    out["fit_bad_arguments"] = {"is_error": bad.is_error, "text": text_of(bad)}
    other = await session.call_tool(
        "fit_context", {"query": "hello", "pipeline": "no-such-pipeline"}
    )
    out["fit_other_pipeline"] = {"is_error": other.is_error, "text": text_of(other)}

    resources = await session.list_resources()
    out["resources"] = [
        {"uri": r.uri, "name": r.name, "mime_type": r.mime_type}
        for r in resources.resources
    ]
    templates = await session.list_resource_templates()
    out["templates"] = [
        {"uri_template": t.uri_template, "name": t.name}
        for t in templates.resource_templates
    ]
    read = await session.read_resource("hostpipe://demo/demo://config/app.json")
    out["read"] = [
        {"uri": c.uri, "mime_type": c.mime_type, "text": getattr(c, "text", None)}
        for c in read.contents
    ]
    expanded = await session.read_resource("hostpipe://demo/demo://docs/handbook")
    out["read_template"] = [
        {"uri": c.uri, "text": getattr(c, "text", None)} for c in expanded.contents
    ]
    out["read_denied"] = await error_of(
        session.read_resource("hostpipe://demo/demo://docs/deployment.md")
    )
    out["read_unbound"] = await error_of(
        session.read_resource("hostpipe://other/demo://config/app.json")
    )
    out["read_not_namespaced"] = await error_of(
        session.read_resource("demo://config/app.json")
    )
    prompts = await session.list_prompts()
    out["prompts"] = [
        {"name": p.name, "arguments": [a.name for a in (p.arguments or [])]}
        for p in prompts.prompts
    ]
    prompt = await session.get_prompt("demo__summarize_doc", {"topic": "handbook"})
    out["prompt"] = [
        {"role": m.role, "type": m.content.type} for m in prompt.messages
    ]
    return out


async def main():
    base, pipeline, conversation = sys.argv[1], sys.argv[2], sys.argv[3]
    admin_token = os.environ["HOSTPIPE_TOKEN"]
    read_token = os.environ["HOSTPIPE_READ_TOKEN"]
    out = await session_for(
        f"{base}/mcp/{pipeline}", admin_token, lambda s: admin(s, conversation)
    )

    async def default(session):
        resources = await session.list_resources()
        fitted = await session.call_tool("fit_context", {"query": "hello"})
        unknown = await session.call_tool(
            "fit_context", {"query": "hello", "pipeline": "no-such-pipeline"}
        )
        return {
            "resources": [r.uri for r in resources.resources],
            "fit_pipeline": (fitted.structured_content or {}).get("pipeline"),
            "fit_unknown": {"is_error": unknown.is_error, "text": text_of(unknown)},
        }

    out["default"] = await session_for(f"{base}/mcp", admin_token, default)

    async def read_only(session):
        tools = await session.list_tools()
        fitted = await session.call_tool("fit_context", {"query": "hello"})
        read = await session.read_resource("hostpipe://demo/demo://config/app.json")
        return {
            "tools": [t.name for t in tools.tools],
            "fit": {"is_error": fitted.is_error, "text": text_of(fitted)},
            "read": len(read.contents),
        }

    out["read_only"] = await session_for(
        f"{base}/mcp/{pipeline}", read_token, read_only
    )
    print(json.dumps(out))


asyncio.run(main())
