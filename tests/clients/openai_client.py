"""A platform's "OpenAI-compatible provider" pointed at hostpipe: the official `openai`
Python SDK with a base URL, a key and a model name (the pipeline id), nothing else.

    python openai_client.py BASE_URL PIPELINE [LIMITED [TOOLED]]    (key in $HOSTPIPE_TOKEN)

Lists the models, asks once without streaming (with `X-Conversation-Id`, a system
message and one earlier exchange), once streaming with `include_usage`, then asks for
a model that does not exist, with a key that is wrong, with `n=2` and with a tool that
is not a function, and (given LIMITED, a pipeline whose upstream answers 429) once more without
retries, and (given TOOLED, a pipeline whose model calls the caller's `lookup` tool)
gets the call, sends its result back and gets the answer, then gets the call streamed;
prints one JSON document of what it saw. The e2e test checks the values.
"""
import json
import os
import sys

import openai


def main():
    base, pipeline = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=os.environ["HOSTPIPE_TOKEN"])
    out = {}

    listed = list(client.models.list())
    out["models"] = [m.id for m in listed]
    one = client.models.retrieve(out["models"][0])
    # A model's `created` does not change from call to call (platforms cache the list).
    again = list(client.models.list())
    out["created_stable"] = len({m.created for m in listed + again} | {one.created}) == 1
    out["retrieved"] = {"id": one.id, "object": one.object, "owned_by": one.owned_by}
    try:
        client.models.retrieve("no-such-pipeline")
        out["retrieved_unknown"] = None
    except openai.NotFoundError as e:
        out["retrieved_unknown"] = e.body.get("code") if isinstance(e.body, dict) else None

    completion = client.chat.completions.create(
        model=pipeline,
        messages=[
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": [{"type": "text", "text": "Which regions are in beta?"}]},
        ],
        extra_headers={"X-Conversation-Id": "conv-openai-1"},
        temperature=0.2,
    )
    out["completion"] = {
        "object": completion.object,
        "id": completion.id,
        "model": completion.model,
        "content": completion.choices[0].message.content,
        "role": completion.choices[0].message.role,
        "finish_reason": completion.choices[0].finish_reason,
        "usage": completion.usage.model_dump() if completion.usage else None,
    }

    stream = client.chat.completions.create(
        model=pipeline,
        messages=[{"role": "user", "content": "Which regions are in beta?"}],
        stream=True,
        stream_options={"include_usage": True},
        user="user-42",
    )
    deltas, finish, usage, objects, roles = [], [], None, set(), []
    for chunk in stream:
        objects.add(chunk.object)
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    out["stream"] = {
        "deltas": deltas,
        "finish_reasons": finish,
        "usage": usage,
        "objects": sorted(objects),
        "roles": roles,
    }

    def error_of(call):
        try:
            call()
        except openai.APIStatusError as e:
            body = e.body if isinstance(e.body, dict) else {}
            return {
                "class": type(e).__name__,
                "status": e.status_code,
                "code": body.get("code"),
                "type": body.get("type"),
                "param": body.get("param"),
            }
        return None

    ask = [{"role": "user", "content": "hi"}]
    out["unknown_model"] = error_of(
        lambda: client.chat.completions.create(model="no-such-pipeline", messages=ask)
    )
    wrong = openai.OpenAI(base_url=f"{base}/v1", api_key="not-the-token-0123456789", max_retries=0)
    out["wrong_key"] = error_of(
        lambda: wrong.chat.completions.create(model=pipeline, messages=ask)
    )
    out["n_2"] = error_of(
        lambda: client.chat.completions.create(model=pipeline, messages=ask, n=2)
    )
    out["not_a_function"] = error_of(
        lambda: client.chat.completions.create(
            model=pipeline, messages=ask, tools=[{"type": "web_search"}]
        )
    )
    if len(sys.argv) > 3:
        once = openai.OpenAI(
            base_url=f"{base}/v1", api_key=os.environ["HOSTPIPE_TOKEN"], max_retries=0
        )
        for key, stream in (("rate_limited", False), ("rate_limited_stream", True)):
            try:
                answer = once.chat.completions.create(
                    model=sys.argv[3], messages=ask, stream=stream
                )
                if stream:
                    list(answer)
                out[key] = None
            except openai.RateLimitError as e:
                out[key] = {
                    "class": type(e).__name__,
                    "status": e.status_code,
                    "code": e.body.get("code") if isinstance(e.body, dict) else None,
                    "retry_after": e.response.headers.get("retry-after"),
                    "message": e.body.get("message") if isinstance(e.body, dict) else None,
                }
    if len(sys.argv) > 4:
        out["caller_tools"] = caller_tools(client, sys.argv[4])
    json.dump(out, sys.stdout)


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Looks up a region",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


def caller_tools(client, pipeline):
    """The caller's own tool: called, answered, continued; then the call streamed."""
    ask = [{"role": "user", "content": "Which regions are in beta?"}]
    first = client.chat.completions.create(model=pipeline, messages=ask, tools=[LOOKUP])
    message = first.choices[0].message
    calls = [
        {"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
        for c in message.tool_calls or []
    ]
    followed = ask + [
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "ap-east: beta"},
    ]
    second = client.chat.completions.create(model=pipeline, messages=followed, tools=[LOOKUP])
    streamed, finish = {}, []
    for chunk in client.chat.completions.create(
        model=pipeline, messages=ask, tools=[LOOKUP], stream=True
    ):
        for choice in chunk.choices:
            for c in choice.delta.tool_calls or []:
                entry = streamed.setdefault(c.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = c.id or entry["id"]
                if c.function:
                    entry["name"] += c.function.name or ""
                    entry["arguments"] += c.function.arguments or ""
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    return {
        "first": {
            "finish_reason": first.choices[0].finish_reason,
            "content": message.content,
            "calls": calls,
        },
        "second": {
            "finish_reason": second.choices[0].finish_reason,
            "content": second.choices[0].message.content,
        },
        "streamed": {"calls": [streamed[i] for i in sorted(streamed)], "finish_reasons": finish},
    }


if __name__ == "__main__":
    main()
