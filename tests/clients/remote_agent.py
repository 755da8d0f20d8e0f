"""A remote agent speaking hostpipe's remote runner protocol version 2, standard library
only: what an agent written in Python by a platform team would do.

    python remote_agent.py OUT_FILE          (prints its port on stdout, then serves)

For each turn it gets (POST /agent), it checks the body is version 2, then calls the
turn's tools through `tool_endpoint`: the calls listed in the turn variable `calls`
(JSON: [{"name", "arguments"}]), one call with a wrong token and one of a tool the turn
does not offer. It answers one JSON reply whose text is a JSON document of what each
call returned (status, error code, the result's text and isError), and writes the
request's tool endpoint (url, token) to OUT_FILE so the test can try the token after
the turn.
"""
import json
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def call_tool(endpoint, token, name, arguments):
    body = json.dumps({"name": name, "arguments": arguments}).encode()
    req = urllib.request.Request(endpoint["url"], data=body, method="POST")
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            doc = json.loads(res.read())
            text = "".join(c.get("text", "") for c in doc["content"] if c["type"] == "text")
            return {"status": res.status, "text": text, "isError": doc["isError"]}
    except urllib.error.HTTPError as e:
        doc = json.loads(e.read() or b"{}")
        return {"status": e.code, "code": doc.get("error", {}).get("code"),
                "message": doc.get("error", {}).get("message")}


class Agent(BaseHTTPRequestHandler):
    out_file = None

    def log_message(self, *args):
        pass

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert request["version"] == "hostpipe.remote_run_request.v2", request["version"]
        endpoint = request["tool_endpoint"]
        with open(self.out_file, "w", encoding="utf-8") as f:
            json.dump(endpoint, f)
        results = {"tools": [t["name"] for t in request["tools"]], "calls": []}
        for call in json.loads(request["variables"].get("calls", "[]")):
            results["calls"].append(call_tool(endpoint, endpoint["token"], call["name"], call.get("arguments", {})))
        results["wrong_token"] = call_tool(endpoint, endpoint["token"] + "x", "none", {})
        results["unknown_tool"] = call_tool(endpoint, endpoint["token"], "nobody__nothing", {})
        body = json.dumps({"text": json.dumps(results)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main():
    Agent.out_file = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Agent)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
