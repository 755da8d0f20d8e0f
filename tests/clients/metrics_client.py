"""Scrapes hostpipe's /metrics as Prometheus would, and parses it with the official
Python client's parsers: the Prometheus text format (0.0.4) when nothing is asked for,
OpenMetrics 1.0 when `Accept` asks for it (as Prometheus's scraper does).

    python metrics_client.py URL

prints one JSON document: for each format (`text`, `openmetrics`) the `content_type`
answered and the `families` parsed, by name: their `type` and `samples`, each
`[name, labels, value]`. Exits non-zero when either parser refuses the exposition.
"""
import json
import sys
import urllib.request

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text


def scrape(url: str, accept: str | None) -> tuple[str, str]:
    req = urllib.request.Request(url)
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=30) as res:
        return res.headers.get("Content-Type", ""), res.read().decode("utf-8")


def families(parsed) -> dict:
    out = {}
    for family in parsed:
        if family.name in out:
            raise SystemExit(f"family {family.name} appears twice")
        out[family.name] = {
            "type": family.type,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
    return out


def main() -> None:
    url = sys.argv[1]
    content_type, text = scrape(url, None)
    om_type, om_text = scrape(
        url, "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    )
    doc = {
        "text": {"content_type": content_type, "families": families(parse_text(text))},
        "openmetrics": {
            "content_type": om_type,
            "families": families(parse_openmetrics(om_text)),
        },
    }
    json.dump(doc, sys.stdout)


if __name__ == "__main__":
    main()
