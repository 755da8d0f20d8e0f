"""The `openai` Python SDK sending the user's image with the message, as platforms do
for a photo in a chat: an `image_url` part with a base64 `data:` URL (an 8×8 PNG made
here), then the same with an `https` URL, which hostpipe refuses.

    python openai_image_client.py BASE_URL PIPELINE    (key in $HOSTPIPE_TOKEN)

Prints one JSON document: the answer, and the refusal's status, code and param.
"""
import base64
import json
import os
import struct
import sys
import zlib

import openai


def png(width: int, height: int) -> bytes:
    """A red `width`×`height` RGB PNG."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def main():
    base, pipeline = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=os.environ["HOSTPIPE_TOKEN"])
    url = "data:image/png;base64," + base64.b64encode(png(8, 8)).decode()
    out = {}
    answer = client.chat.completions.create(
        model=pipeline,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "What colour is this picture?"},
            {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
        ]}],
    )
    out["content"] = answer.choices[0].message.content
    try:
        client.chat.completions.create(
            model=pipeline,
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "And this one?"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
            ]}],
        )
        out["remote"] = None
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        out["remote"] = {"status": e.status_code, "code": body.get("code"), "param": body.get("param")}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
