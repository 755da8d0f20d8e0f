"""A 2025-11-25 MCP server over stdio that exits on any request before `initialize`,
as some older servers do: the reason `protocol = "2025-11-25"` exists (hostpipe's
`auto` mode probes with `server/discover` first). Written without an SDK, so that it
behaves exactly so; it serves one text resource.
"""

import json
import sys

RESOURCE = {"uri": "old://readme", "name": "readme", "mimeType": "text/plain"}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    initialized = False
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message:
            continue  # notifications (initialized, cancelled)
        if not initialized and method != "initialize":
            sys.stderr.write(f"initialize_first_server: `{method}` before initialize; exiting\n")
            sys.exit(1)
        if method == "initialize":
            initialized = True
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"resources": {}},
                "serverInfo": {"name": "initialize-first", "version": "1.0"},
            }
        elif method == "resources/list":
            result = {"resources": [RESOURCE]}
        elif method == "resources/read":
            result = {"contents": [{"uri": RESOURCE["uri"], "mimeType": "text/plain", "text": "Old but fine."}]}
        elif method == "ping":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no method {method}"}})
            continue
        send({"jsonrpc": "2.0", "id": message["id"], "result": result})


if __name__ == "__main__":
    main()
