"""A bot platform written in Python, using hostpipe over HTTP: what LangBot or AstrBot
would do. Standard library only (urllib), so it shows the API needs nothing special.

    python platform_client.py BASE_URL SERVER      (token in $HOSTPIPE_READ_TOKEN)
    python platform_client.py BASE_URL tools PIPELINE  (token in $HOSTPIPE_ADMIN_TOKEN)

Lists the servers, then SERVER's resources and resource templates, reads the first
resource and the `greeting://{name}` template, tries to run a turn with the read-only
token, and prints one JSON document of what it saw. The e2e test checks the values.

In `tools` mode it uses server-everything (`everything`) and server-filesystem (`fs`)
through PIPELINE: lists the tools the pipeline offers, calls `get-sum`, a tool the
pipeline leaves out, `fs`'s `write_file` and a tool of a server the pipeline does not
bind, an unknown tool, arguments that are not an object, gets `args-prompt` and an
unknown prompt, and reads the tool call history.

With $HOSTPIPE_OPENAPI (docs/openapi.json) set, every answer is also validated against
the schema the document gives for its route, method and status (JSON Schema 2020-12,
the dialect of OpenAPI 3.1), so the checked-in document cannot drift from the service.
"""
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


class HostpipeError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


class OpenApiCheck:
    """Validates answers against an OpenAPI 3.1 document's response schemas."""

    def __init__(self, path):
        from jsonschema import Draft202012Validator

        with open(path, encoding="utf-8") as f:
            self.doc = json.load(f)
        self.validator = Draft202012Validator
        for name, schema in self.doc["components"]["schemas"].items():
            Draft202012Validator.check_schema(schema)
        self.checked = 0

    def check(self, route, method, status, body):
        responses = self.doc["paths"][route][method.lower()]["responses"]
        response = responses.get(str(status))
        if response is None:
            raise AssertionError(f"{method} {route}: status {status} is not documented")
        if "$ref" in response:
            response = self.doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
        schema = response.get("content", {}).get("application/json", {}).get("schema")
        if schema is None:
            if body is not None:
                raise AssertionError(f"{method} {route} {status}: a body, but none documented")
            return
        root = {**schema, "components": self.doc["components"]}
        errors = sorted(self.validator(root).iter_errors(body), key=str)
        if errors:
            raise AssertionError(f"{method} {route} {status}: {errors[0].message} at {list(errors[0].absolute_path)}")
        self.checked += 1


class Hostpipe:
    def __init__(self, base_url, token, timeout=30, openapi=None):
        self.base_url, self.token, self.timeout = base_url.rstrip("/"), token, timeout
        self.openapi = openapi

    def _call(self, method, route, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
                doc = json.loads(raw) if raw else None
                if self.openapi:
                    self.openapi.check(route, method, res.status, doc)
                return doc
        except urllib.error.HTTPError as e:
            doc = json.loads(e.read() or b"{}")
            if self.openapi:
                self.openapi.check(route, method, e.code, doc)
            err = doc.get("error", {})
            raise HostpipeError(e.code, err.get("code"), err.get("message")) from None

    @staticmethod
    def _q(name):
        return urllib.parse.quote(name, safe="")

    def server(self, name):
        return self._call("GET", "/v1/servers/{server}", f"/v1/servers/{self._q(name)}")

    def resources(self, name):
        route = "/v1/servers/{server}/resources"
        return self._call("GET", route, f"/v1/servers/{self._q(name)}/resources")["resources"]

    def resource_templates(self, name):
        route = "/v1/servers/{server}/resource-templates"
        path = f"/v1/servers/{self._q(name)}/resource-templates"
        return self._call("GET", route, path)["resource_templates"]

    def read(self, name, uri=None, template=None, arguments=None):
        body = {"uri": uri} if uri else {"template": template, "arguments": arguments or {}}
        route = "/v1/servers/{server}/resources/read"
        return self._call("POST", route, f"/v1/servers/{self._q(name)}/resources/read", body)

    def history(self, **filters):
        query = urllib.parse.urlencode(filters)
        return self._call("GET", "/v1/history", f"/v1/history?{query}")

    def tools(self, name, pipeline=None):
        query = f"?pipeline={self._q(pipeline)}" if pipeline else ""
        route = "/v1/servers/{server}/tools"
        return self._call("GET", route, f"/v1/servers/{self._q(name)}/tools{query}")

    def call_tool(self, name, tool, pipeline, arguments=None, **fields):
        body = {"pipeline": pipeline, "arguments": arguments or {}, **fields}
        route = "/v1/servers/{server}/tools/{name}/call"
        path = f"/v1/servers/{self._q(name)}/tools/{self._q(tool)}/call"
        return self._call("POST", route, path, body)

    def prompt(self, name, prompt, arguments):
        route = "/v1/servers/{server}/prompts/{name}"
        path = f"/v1/servers/{self._q(name)}/prompts/{self._q(prompt)}"
        return self._call("POST", route, path, {"arguments": arguments})

    def tool_history(self, **filters):
        query = urllib.parse.urlencode(filters)
        return self._call("GET", "/v1/history/tool-calls", f"/v1/history/tool-calls?{query}")

    def run_turn(self, pipeline, message, **fields):
        body = {"pipeline": pipeline, "message": message, **fields}
        return self._call("POST", "/v1/turns", "/v1/turns", body)


def error_code(call):
    try:
        call()
    except HostpipeError as e:
        return e.code
    return None


def tools_main(base_url, pipeline, check):
    api = Hostpipe(base_url, os.environ["HOSTPIPE_ADMIN_TOKEN"], openapi=check)
    listed = api.tools("everything", pipeline)["tools"]
    offered = {t["name"]: t["offered_as"] for t in listed}
    summed = api.call_tool("everything", "get-sum", pipeline, {"a": 2, "b": 3}, conversation_id="c-py")
    text = "".join(c["text"] for c in summed["result"]["content"] if c["type"] == "text")
    print(json.dumps({
        "offered": {k: offered[k] for k in ("get-sum", "get-env", "echo")},
        "annotations": next(t["annotations"] for t in listed if t["name"] == "get-sum"),
        "sum": text,
        "sum_call": summed["call"],
        "left_out": error_code(lambda: api.call_tool("everything", "echo", pipeline, {"message": "hi"})),
        "write": error_code(lambda: api.call_tool("fs", "write_file", pipeline, {"path": os.environ["FS_TARGET"], "content": "from python"})),
        "unbound": error_code(lambda: api.call_tool("demo", "search_docs", pipeline, {"query": "x"})),
        "unknown": error_code(lambda: api.call_tool("everything", "no-such-tool", pipeline)),
        "bad_arguments": error_code(lambda: api._call(
            "POST", "/v1/servers/{server}/tools/{name}/call", "/v1/servers/everything/tools/get-sum/call",
            {"pipeline": pipeline, "arguments": [2, 3]})),
        "prompt": api.prompt("everything", "args-prompt", {"city": "Paris"}),
        "unknown_prompt": error_code(lambda: api.prompt("everything", "no-such-prompt", {})),
        "history": [(c["tool"], c["origin"], c["withheld"]) for c in api.tool_history(pipeline=pipeline)["calls"]],
        "openapi_checked": check.checked if check else 0,
    }))


def main():
    spec = os.environ.get("HOSTPIPE_OPENAPI")
    check = OpenApiCheck(spec) if spec else None
    if sys.argv[2] == "tools":
        return tools_main(sys.argv[1], sys.argv[3], check)
    base_url, server = sys.argv[1], sys.argv[2]
    api = Hostpipe(base_url, os.environ["HOSTPIPE_READ_TOKEN"], openapi=check)
    info = api.server(server)
    resources = api.resources(server)
    templates = api.resource_templates(server)
    first = api.read(server, uri=resources[0]["uri"])["contents"][0]
    greeting = api.read(server, template="greeting://{name}", arguments={"name": "Grace Hopper"})
    try:
        api.run_turn("default", "hello")
        turn_status, turn_error = 200, None
    except HostpipeError as e:
        turn_status, turn_error = e.status, e.code
    try:
        api.server("no-such-server")
    except HostpipeError as e:
        unknown = e.code
    history = api.history(limit=5)
    print(json.dumps({
        "unknown_server": unknown,
        "history_records": len(history["records"]),
        "openapi_checked": check.checked if check else 0,
        "server": info,
        "resources": [r["uri"] for r in resources],
        "resource_templates": [t["uri_template"] for t in templates],
        "read": {"mime_type": first["mime_type"], "kind": first["kind"], "text": first["text"]},
        "greeting": greeting["contents"][0]["text"],
        "turn_status": turn_status,
        "turn_error": turn_error,
    }))


if __name__ == "__main__":
    main()
