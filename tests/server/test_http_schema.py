"""The live HTTP API fuzzed against its own OpenAPI document (schemathesis): every operation of
/openapi.json, with requests the document allows and requests it does not (a field of the
wrong type, a required one missing, a header out of its range), sent to a server on
127.0.0.1. Each answer is checked as the document declares it: a status it lists, its content
type, a body its schema validates, a request the document does not allow refused with a 4xx,
and never a server error; the log holds no traceback. docs/reliability.md, "Fuzzing", has
what the checks found.

One check is narrowed, not dropped: a 504 (DEADLINE_EXCEEDED) is the right answer to a
request whose X-Request-Timeout the fuzzer drew too short to meet (1e-300 seconds is a valid
deadline), so a 504 passes where the request set one, and any other 5xx fails. One check is
added: schemathesis reads an event stream's schema as that of each event's fields (`data`,
`event`), which the document's message schema, naming neither, passes whatever the data; so
each event's data of a stream (server-sent events) is read as JSON and validated here, a
message against the method's answer, an `error` event against the Error schema. No
operation is left out: a file upload is answered at once (its file of random bytes is
refused). The stateful phase is off: the API
declares no links between its operations. Examples are derandomised (the same cases every
run) and bounded: ATTNSERVE_SCHEMA_EXAMPLES an operation in the fuzzing phase (default 200,
some 4,500 requests in all with the examples and coverage phases, about a minute on two
cores)."""

from __future__ import annotations

import json
import os

import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from service.front.http.calls import TIMEOUT_HEADER

EXAMPLES = int(os.environ.get("ATTNSERVE_SCHEMA_EXAMPLES", "200"))
CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def fuzzed(start_server):
    return start_server("--workers", "1", "--http-listen", "127.0.0.1:0")


@pytest.fixture
def api_schema(fuzzed):
    config = schemathesis.Config.from_dict(
        {
            "seed": 20261130,
            "generation": {"mode": "all", "max-examples": EXAMPLES, "database": "none"},
            "phases": {"stateful": {"enabled": False}},
            "request-timeout": 60,
        }
    )
    return schemathesis.openapi.from_url(f"{fuzzed.http_url}/openapi.json", config=config)


schema = schemathesis.pytest.from_fixture("api_schema")


def server_error(response, case) -> str | None:
    """Why a 5xx is a failure, or None for a 504 past the deadline the request set."""
    if response.status_code < 500:
        return None
    sent = {k.lower() for k in (case.headers or {})}
    if response.status_code == 504 and TIMEOUT_HEADER in sent:
        return None
    return f"{response.status_code}: {response.text[:500]}"


def stream_error(response, case) -> str | None:
    """Why an event stream's answer does not match the document: an event whose data is not
    JSON of the method's answer (an `error` event: of the Error schema); None where it does,
    or where the answer is no stream."""
    if not response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        return None
    document = case.operation.schema.raw_schema
    content = document["paths"][case.path]["post"]["responses"]["200"]["content"]
    for block in response.text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        if fields.get("event") == "error":
            schema = {"$ref": "#/components/schemas/Error"}
        else:
            schema = content["text/event-stream"]["schema"]
        validator = jsonschema_rs.validator_for(schema | {"components": document["components"]})
        data = json.loads(fields["data"])
        if not validator.is_valid(data):
            return f"{case.path}: an event does not match its schema: {block[:500]}"
    return None


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_what_the_document_declares(case, fuzzed):
    log = fuzzed.log_file.read_text()
    response = case.call(timeout=60)
    assert server_error(response, case) is None, server_error(response, case)
    case.validate_response(response, checks=CHECKS, excluded_checks=[not_a_server_error])
    assert stream_error(response, case) is None, stream_error(response, case)
    assert "Traceback" not in fuzzed.log_file.read_text()[len(log) :]
