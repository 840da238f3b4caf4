"""Every query under deploy/ (the Prometheus rules and alerts, the series their unit tests
feed them, the Grafana dashboard's panels, legends and variables) names metrics and labels
that a running front exports: a metric or label renamed in the server leaves a panel empty
or an alert silent, and neither promtool nor Grafana says so."""

from __future__ import annotations

import json
import re
from pathlib import Path

import grpc
import yaml
from prometheus_client.parser import text_string_to_metric_families

from service import client
from service.front.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# the samples a family of each type is scraped as (prometheus_client's text format)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
# labels Prometheus gives every series it scrapes; on Kubernetes also the pod's namespace,
# name and labels (deploy/kubernetes: annotation scraping with `labelmap`)
SCRAPED = {"instance", "job", "namespace", "pod"} | {
    "app_kubernetes_io_name",
    "app_kubernetes_io_part_of",
}
METRIC = re.compile(r"\battnserve_[a-z0-9_]+")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"([^"]*)"')
LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}|\$labels\.(\w+)")
LABEL_VALUES = re.compile(r"label_values\(\s*\w+\s*,\s*(\w+)\s*\)")


def deploy_queries() -> list[tuple[str, str]]:
    """(where, text) of every query under deploy/: an alert's expression with its
    annotations (a recorded series it reads spelt out as its rule's expression), a
    recording rule's, an input series of the rules' unit tests, a dashboard panel's
    expression with its legend, a dashboard variable's query."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yml").read_text())
    rules = [rule for group in rules["groups"] for rule in group["rules"]]
    records = {rule["record"]: rule["expr"] for rule in rules if "record" in rule}
    found = []
    for rule in rules:
        text = rule["expr"] + " " + " ".join(rule.get("annotations", {}).values())
        for record, expr in records.items():
            text = text.replace(record, f"({expr})")
        found.append((rule.get("record") or rule["alert"], text))
    tests = yaml.safe_load((DEPLOY / "prometheus" / "rules_test.yml").read_text())
    for test in tests["tests"]:
        found += [("rules_test.yml", series["series"]) for series in test["input_series"]]
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "attnserve.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            found.append((panel["title"], f"{target['expr']} {target['legendFormat']}"))
    variables = dashboard["templating"]["list"]
    found += [(f"${v['name']}", v["query"]) for v in variables if v["type"] == "query"]
    return found


def exported(scrape: str) -> tuple[dict[str, set[str]], dict[str, set[float]]]:
    """({sample name: its label names}, {histogram's bucket sample name: its bounds}) of
    every metric a front's scrape declares: the labels of its samples, and for a metric with
    none yet (no call of a Ray cluster, no token refused) the labels it is declared with."""
    declared = {
        metric._name: set(metric._labelnames)
        for metric in vars(Metrics()).values()
        if hasattr(metric, "_labelnames")
    }
    names, bounds = {}, {}
    for family in text_string_to_metric_families(scrape):
        labels = declared.get(family.name.removesuffix("_info"), set())
        labels |= {key for sample in family.samples for key in sample.labels}
        for suffix in SUFFIXES.get(family.type, ("",)):
            names[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
        for sample in family.samples:
            if "le" in sample.labels:
                bounds.setdefault(sample.name, set()).add(float(sample.labels["le"]))
    return names, bounds


def labels_used(text: str) -> dict[str, set[str]]:
    """{label name: the values it is matched against} of a query (a grouping, a legend or an
    annotation names a label with no value)."""
    used: dict[str, set[str]] = {}
    for grouping in GROUPING.findall(text):
        for name in filter(None, (n.strip() for n in grouping.split(","))):
            used.setdefault(name, set())
    for legend in LEGEND.findall(text):
        used.setdefault(legend[0] or legend[1], set())
    for name, value in MATCHER.findall(LEGEND.sub("", text)):
        used.setdefault(name, set()).update(value.split("|"))
    for name in LABEL_VALUES.findall(text):
        used.setdefault(name, set())
    return used


def impossible_values(label: str, values: set[str], metrics: set[str], bounds: dict) -> set:
    """The values a query matches `label` against that the server never gives it: a gRPC
    status code's name for `code`, a bucket's bound of the histograms named for `le`."""
    plain = {v for v in values if not any(c in v for c in ".*+?[($")}  # regexes left alone
    if label == "code":
        return plain - {code.name for code in grpc.StatusCode}
    if label == "le":
        known = set().union(*(bounds.get(name, set()) for name in metrics))
        return {v for v in plain if float(v) not in known}
    return set()


def test_every_metric_and_label_deploy_queries_is_one_a_running_front_exports(server):
    client.translate(server.channel, ["Yo soy de Canadá."])  # every request bucket scraped
    names, bounds = exported(server.scrape())
    queries = deploy_queries()
    assert len(queries) > 30  # every rule, series, panel target and variable read
    unknown, unlabelled, impossible = [], [], []
    for where, text in queries:
        metrics = set(METRIC.findall(text))
        unknown += [(where, name) for name in sorted(metrics - names.keys())]
        labels = SCRAPED.union(*(names.get(name, set()) for name in metrics))
        for label, values in labels_used(text).items():
            if label not in labels:
                unlabelled.append((where, label))
            never = impossible_values(label, values, metrics, bounds)
            impossible += [(where, label, value) for value in sorted(never)]
    assert unknown == [] and unlabelled == [] and impossible == []


def test_the_docs_metrics_table_names_every_metric_a_running_front_exports(server):
    """docs/serving.md's table of metrics, first column, against the scrape: each metric as
    a query names it (a counter with `_total`, a histogram by its own name)."""
    docs = (DEPLOY.parent / "docs" / "serving.md").read_text()
    table = docs[docs.index("| metric | what |") : docs.index("Histogram buckets are declared")]
    rows = [line.split("|")[1] for line in table.splitlines()[2:] if line.startswith("|")]
    documented = {name for row in rows for name in METRIC.findall(row)}
    families = {
        family.name + ("_total" if family.type == "counter" else ""): family.type
        for family in text_string_to_metric_families(server.scrape())
        if not family.name.endswith("_created")
    }
    assert documented == families.keys()


def test_the_check_finds_a_misspelt_metric_label_and_status_code():
    """What the test above reads in a query, on queries spelt wrong."""
    names = {"attnserve_requests_in_flight": {"model", "method"}}
    assert METRIC.findall('sum by (model) (attnserve_request_in_flight{model=~"$model"})') == [
        "attnserve_request_in_flight"
    ]
    text = 'sum by (modle) (x{code!~"OK|INVALID_ARGUMENTS"}) {{method}} $labels.instance'
    assert labels_used(text) == {
        "modle": set(),
        "method": set(),
        "instance": set(),
        "code": {"OK", "INVALID_ARGUMENTS"},
    }
    assert "modle" not in names["attnserve_requests_in_flight"] | SCRAPED
    codes = impossible_values("code", labels_used(text)["code"], set(), {})
    assert codes == {"INVALID_ARGUMENTS"}
    series = 'x_bucket{le="8"} x_bucket{le="+Inf"} x_bucket{le="10"}'
    assert impossible_values(
        "le", labels_used(series)["le"], {"x_bucket"}, {"x_bucket": {5.0, 10.0, float("inf")}}
    ) == {"8"}
