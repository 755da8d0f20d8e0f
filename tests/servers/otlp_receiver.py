"""An OTLP/HTTP trace receiver built on the official OTLP protobuf definitions (PyPI
`opentelemetry-proto`), for the end-to-end tests.

    python otlp_receiver.py SPANS_FILE

Listens on 127.0.0.1 (a free port), prints `listening on PORT` once it accepts, and
takes `POST /v1/traces` with an `application/x-protobuf` body (gzip allowed) as the
OTLP specification says ("OTLP/HTTP"): the body is decoded as an
`ExportTraceServiceRequest` and each span is appended to SPANS_FILE as one JSON line:
`name`, `kind` (`SPAN_KIND_*`), `trace_id`, `span_id`, `parent_span_id` (lowercase hex,
"" for a root), `status` (`STATUS_CODE_*`), `attributes` (key -> value), and the
resource's `service.name`. The answer is an empty `ExportTraceServiceResponse`. A body
that does not decode is answered 400, another content type 415, another path 404.
"""
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

WRITE = threading.Lock()


def value(any_value):
    """An OTLP AnyValue as a JSON value."""
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Receiver(BaseHTTPRequestHandler):
    spans_file = None

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", content_type="application/x-protobuf"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            return self.answer(404, b"not found", "text/plain")
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type != "application/x-protobuf":
            return self.answer(415, f"unsupported content type {content_type}".encode(), "text/plain")
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            return self.answer(400, f"not an ExportTraceServiceRequest: {e}".encode(), "text/plain")
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "name": span.name,
                        "kind": Span.SpanKind.Name(span.kind),
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "status": Status.StatusCode.Name(span.status.code),
                        "attributes": attributes(span.attributes),
                        "service_name": resource.get("service.name"),
                        "scope": scope_spans.scope.name,
                    }))
        with WRITE, open(self.spans_file, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")
        self.answer(200, ExportTraceServiceResponse().SerializeToString())


def main():
    Receiver.spans_file = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
