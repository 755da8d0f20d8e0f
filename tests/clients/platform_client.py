"""A bot platform written in Python, using hostpipe over HTTP: what LangBot or AstrBot
would do. Standard library only (urllib), so it shows the API needs nothing special.

    python platform_client.py BASE_URL SERVER      (token in $HOSTPIPE_READ_TOKEN)

Lists the servers, then SERVER's resources and resource templates, reads the first
resource and the `greeting://{name}` template, tries to run a turn with the read-only
token, and prints one JSON document of what it saw. The e2e test checks the values.
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


class Hostpipe:
    def __init__(self, base_url, token, timeout=30):
        self.base_url, self.token, self.timeout = base_url.rstrip("/"), token, timeout

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                raw = res.read()
                return json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            err = json.loads(e.read() or b"{}").get("error", {})
            raise HostpipeError(e.code, err.get("code"), err.get("message")) from None

    def server(self, name):
        return self._call("GET", f"/v1/servers/{urllib.parse.quote(name, safe='')}")

    def resources(self, name):
        return self._call("GET", f"/v1/servers/{urllib.parse.quote(name, safe='')}/resources")["resources"]

    def resource_templates(self, name):
        path = f"/v1/servers/{urllib.parse.quote(name, safe='')}/resource-templates"
        return self._call("GET", path)["resource_templates"]

    def read(self, name, uri=None, template=None, arguments=None):
        body = {"uri": uri} if uri else {"template": template, "arguments": arguments or {}}
        path = f"/v1/servers/{urllib.parse.quote(name, safe='')}/resources/read"
        return self._call("POST", path, body)

    def run_turn(self, pipeline, message, **fields):
        return self._call("POST", "/v1/turns", {"pipeline": pipeline, "message": message, **fields})


def main():
    base_url, server = sys.argv[1], sys.argv[2]
    api = Hostpipe(base_url, os.environ["HOSTPIPE_READ_TOKEN"])
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
    print(json.dumps({
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
