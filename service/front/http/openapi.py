"""The OpenAPI document of the HTTP API, written from the contract's own descriptors: each
/v1 method's body and answer are the JSON schemas of its protobuf messages (protobuf's JSON
mapping: lowerCamelCase names, enums by name, 64-bit integers and bytes as strings), so the
document cannot drift from the .proto files."""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from service.front.http.calls import TIMEOUT_HEADER, URL_ENCODED
from service.front.http.contract import FORMS

SCALARS = {
    FieldDescriptor.TYPE_DOUBLE: {"type": "number"},
    FieldDescriptor.TYPE_FLOAT: {"type": "number"},
    FieldDescriptor.TYPE_INT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SINT32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_SFIXED32: {"type": "integer", "format": "int32"},
    FieldDescriptor.TYPE_UINT32: {"type": "integer", "format": "uint32", "minimum": 0},
    FieldDescriptor.TYPE_FIXED32: {"type": "integer", "format": "uint32", "minimum": 0},
    FieldDescriptor.TYPE_INT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SINT64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_SFIXED64: {"type": "string", "format": "int64"},
    FieldDescriptor.TYPE_UINT64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_FIXED64: {"type": "string", "format": "uint64"},
    FieldDescriptor.TYPE_BOOL: {"type": "boolean"},
    FieldDescriptor.TYPE_STRING: {"type": "string"},
    FieldDescriptor.TYPE_BYTES: {"type": "string", "format": "byte"},
}
ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer", "description": "the HTTP status"},
                "status": {"type": "string", "description": "the gRPC status, by name"},
                "message": {"type": "string", "description": "what is wrong, naming the field"},
            },
        }
    },
}


def _lt(name: str) -> dict:
    return {"$ref": f"#/components/schemas/LibreTranslate.{name}"}


TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
API_KEY = {
    "type": ["string", "null"],
    "description": "a bearer token, where tokens are on (null: none, as Mastodon sends it)",
}
LANGUAGE = {"type": "string", "description": "an ISO 639-1 code"}
DETECTED = {
    "type": "object",
    "properties": {"confidence": {"type": "number"}, "language": {"type": "string"}},
}
TRANSLATE_REQUEST = {
    "type": "object",
    "required": ["q", "source", "target"],
    "properties": {
        "q": TEXTS | {"description": "a text, or a list of texts"},
        "source": LANGUAGE | {"description": "an ISO 639-1 code, or auto"},
        "target": LANGUAGE,
        "format": {"type": ["string", "null"], "enum": ["text", "html", None], "default": "text"},
        "alternatives": {
            "type": ["integer", "null"],
            "default": 0,
            "description": "how many other translations to send: below 0 is 0, as in "
            "LibreTranslate (a number's text is read too, as a form sends it)",
        },
        "api_key": API_KEY,
    },
}
DETECT_REQUEST = {
    "type": "object",
    "required": ["q"],
    "properties": {"q": TEXTS, "api_key": API_KEY},
}


def _one_text(request: dict) -> dict:
    """A LibreTranslate request as a URL-encoded form carries it: one text in `q` (the first,
    where `q` comes again), as LibreTranslate reads a form."""
    one = {"type": "string", "description": "a text"}
    # a form's field is text: there is no null to send
    texts = {"q": one, "api_key": API_KEY | {"type": "string"}}
    if "format" in request["properties"]:
        texts |= {
            "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
            "alternatives": request["properties"]["alternatives"] | {"type": "integer"},
        }
    return request | {"properties": request["properties"] | texts}


LIBRETRANSLATE_SCHEMAS = {
    "LibreTranslate.Error": {"type": "object", "properties": {"error": {"type": "string"}}},
    "LibreTranslate.TranslateRequest": TRANSLATE_REQUEST,
    "LibreTranslate.TranslateForm": _one_text(TRANSLATE_REQUEST),
    "LibreTranslate.Translation": {
        "type": "object",
        "properties": {
            "translatedText": TEXTS,
            "detectedLanguage": {
                "oneOf": [DETECTED, {"type": "array", "items": DETECTED}],
                "description": "where the source was auto",
            },
            "alternatives": {"type": "array", "description": "where alternatives were asked"},
        },
    },
    "LibreTranslate.DetectRequest": DETECT_REQUEST,
    "LibreTranslate.DetectForm": _one_text(DETECT_REQUEST),
    "LibreTranslate.FileRequest": {
        "type": "object",
        "required": ["file", "source", "target"],
        "properties": {
            "file": {"type": "string", "format": "binary"},
            "source": LANGUAGE | {"description": "an ISO 639-1 code, or auto"},
            "target": LANGUAGE,
            "api_key": API_KEY | {"type": "string"},
        },
    },
}
DEADLINE = {
    "name": TIMEOUT_HEADER,
    "in": "header",
    "required": False,
    "schema": {"type": "number", "exclusiveMinimum": 0},
    "description": "seconds the call may take: its deadline",
}
LT_ERRORS = {
    "default": {
        "description": "an error: 400 a bad request, 403 a bad key, 413 a body too large, "
        "429 overloaded, 503 draining, 504 past the deadline its X-Request-Timeout set",
        "content": {"application/json": {"schema": _lt("Error")}},
    }
}


def _lt_call(
    summary: str, request: str | None, answer: dict, example=None, deadline: bool = False
) -> dict:
    """A LibreTranslate operation: its body (a schema of LIBRETRANSLATE_SCHEMAS as JSON, its
    Form as a URL-encoded form; a file's as a multipart form), its answer's schema, and
    where it reads one (`deadline`: a translation's), its deadline's header."""
    operation: dict = {"summary": f"LibreTranslate: {summary}", "tags": ["LibreTranslate"]}
    if deadline:
        operation["parameters"] = [DEADLINE]
    if request == "FileRequest":
        content = {"multipart/form-data": {"schema": _lt(request)}}
        operation["requestBody"] = {"required": True, "content": content}
    elif request is not None:
        content = {
            "application/json": {"schema": _lt(request), "example": example},
            URL_ENCODED: {"schema": _lt(request.replace("Request", "Form"))},
        }
        operation["requestBody"] = {"required": True, "content": content}
    ok = {"description": "as LibreTranslate answers", "content": {"application/json": answer}}
    operation["responses"] = {"200": ok, **LT_ERRORS}
    return operation


LANGUAGES = {
    "schema": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "name": {"type": "string"},
                "targets": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
}
LIBRETRANSLATE_PATHS = {
    "/translate": {
        "post": _lt_call(
            "translate text",
            "TranslateRequest",
            {"schema": _lt("Translation")},
            {"q": "Hola, ¿cómo estás?", "source": "auto", "target": "en"},
            deadline=True,
        )
    },
    "/detect": {
        "post": _lt_call(
            "detect the language of a text",
            "DetectRequest",
            {"schema": {"type": "array", "items": DETECTED}},
            {"q": "Hola, ¿cómo estás?"},
        )
    },
    "/languages": {
        verb: _lt_call("the languages served", None, LANGUAGES) for verb in ("get", "post")
    },
    "/translate_file": {
        "post": _lt_call(
            "translate a file",
            "FileRequest",
            {"schema": {"type": "object", "properties": {"translatedFileUrl": {"type": "string"}}}},
            deadline=True,
        )
    },
    "/download_file/{name}": {
        "get": {
            "summary": "LibreTranslate: a translated file, from its translatedFileUrl",
            "tags": ["LibreTranslate"],
            "parameters": [
                {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
            ],
            "responses": {
                "200": {"description": "the file"},
                **LT_ERRORS,
            },
        }
    },
    "/frontend/settings": {
        "get": _lt_call("the settings of its page", None, {"schema": {"type": "object"}})
    },
    "/health": {"get": _lt_call("health", None, {"schema": {"type": "object"}})},
    "/suggest": {
        "post": {
            "summary": "LibreTranslate: suggestions, off on this server (403)",
            "tags": ["LibreTranslate"],
            "responses": LT_ERRORS,
        }
    },
}


# an image of one pixel, a PNG in base64, that a captioner captions
PIXEL = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mM4EaABAAMkAUEj5ExoAAAAAElFTkSuQmCC"
)
# a body each method answers as it is (the page at /docs sends it; without one it sends the
# schema's, every option 0, which is refused)
EXAMPLES = {
    "attnserve.v1.TranslateRequest": {"texts": ["Hola, ¿cómo estás?"]},
    "attnserve.v1.TranslateStreamRequest": {"text": "Hola, ¿cómo estás?"},
    "attnserve.v1.ScoreRequest": {"pairs": [{"source": "Hola.", "target": "Hello."}]},
    "attnserve.v1.CaptionRequest": {"images": [PIXEL]},
    "attnserve.v1.CaptionStreamRequest": {"image": PIXEL},
}


def message_schemas(descriptor: Descriptor, schemas: dict) -> dict:
    """A reference to `descriptor`'s schema, adding it and those it uses to `schemas`."""
    name = descriptor.full_name
    if name not in schemas:
        schemas[name] = {}  # a placeholder: a message may refer to itself
        properties = {}
        for field in descriptor.fields:
            properties[field.json_name] = _field_schema(field, schemas)
        schemas[name] = {"type": "object", "properties": properties}
    return {"$ref": f"#/components/schemas/{name}"}


def _field_schema(field: FieldDescriptor, schemas: dict) -> dict:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        one = message_schemas(field.message_type, schemas)
    elif field.type == FieldDescriptor.TYPE_ENUM:
        one = {"type": "string", "enum": [v.name for v in field.enum_type.values]}
    else:
        one = dict(SCALARS[field.type])
    return {"type": "array", "items": one} if field.is_repeated else one


# a bytes field of each form as contract.form_fields reads it: a multipart form's file, or
# a URL-encoded form's text (it carries no file), taken as its UTF-8
FORM_BYTES = {
    "multipart/form-data": {"type": "string", "format": "binary"},
    URL_ENCODED: {"type": "string", "description": "its bytes as UTF-8 text"},
}


def form_schema(descriptor: Descriptor, media: str) -> dict:
    """`descriptor`'s message as the fields of a form of `media` (contract.form_fields reads
    them): FORM_BYTES for a bytes field, JSON text for a message."""
    properties = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_BYTES:
            one = FORM_BYTES[media]
            properties[field.json_name] = (
                {"type": "array", "items": one} if field.is_repeated else one
            )
        elif field.type == FieldDescriptor.TYPE_MESSAGE:  # a list or a map too, as JSON
            many = "a list of " if field.is_repeated else ""
            description = f"{many}{field.message_type.full_name} as JSON"
            properties[field.json_name] = {"type": "string", "description": description}
        else:
            properties[field.json_name] = _field_schema(field, {})
    return {"type": "object", "properties": properties}


def _health(status: str) -> dict:
    schema = {"type": "object", "properties": {"status": {"const": status}}}
    return {"application/json": {"schema": schema}}


MODELS = {
    "application/json": {
        "schema": {
            "type": "object",
            "properties": {
                "models": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "version": {"type": "string"},
                            "service": {"type": "string"},
                            "kind": {"type": "string"},
                            "default": {"type": "boolean"},
                            "languages": {
                                "type": "object",
                                "properties": {
                                    "source": {"type": "array", "items": {"type": "string"}},
                                    "target": {"type": "array", "items": {"type": "string"}},
                                },
                            },
                        },
                    },
                }
            },
        }
    }
}


def openapi_document(endpoints, libretranslate: bool) -> dict:
    """The document of the /v1 endpoints (and LibreTranslate's paths, when served)."""
    schemas: dict = {"Error": ERROR}
    paths: dict = {}
    for endpoint in endpoints:
        method = endpoint.method
        answer = message_schemas(method.output_type, schemas)
        media = "text/event-stream" if method.server_streaming else "application/json"
        body = {"schema": message_schemas(method.input_type, schemas)}
        if method.input_type.full_name in EXAMPLES:
            body["example"] = EXAMPLES[method.input_type.full_name]
        paths[endpoint.path] = {
            "post": {
                "operationId": method.full_name,
                "summary": f"{method.containing_service.full_name}/{method.name}",
                "tags": [method.containing_service.name],
                "parameters": [DEADLINE],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": body,
                        **{
                            media: {"schema": form_schema(method.input_type, media)}
                            for media in FORMS
                        },
                    },
                },
                "responses": {
                    "200": {
                        "description": "one message, or a stream of them as server-sent events",
                        "content": {media: {"schema": answer}},
                    },
                    "default": {
                        "description": "an error: its gRPC status as HTTP's (429 overloaded), "
                        "413 a body too large",
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                        },
                    },
                },
            }
        }
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    paths["/v1/health"] = {
        "get": {
            "summary": "SERVING (200) or NOT_SERVING (503)",
            "tags": ["health"],
            "parameters": [
                {
                    "name": "service",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "one service by its full name (or liveness); all by default",
                }
            ],
            "responses": {
                "200": {"description": "serving", "content": _health("SERVING")},
                "503": {"description": "not serving", "content": _health("NOT_SERVING")},
                "404": {"description": "no such service", "content": error},
            },
        }
    }
    paths["/v1/models"] = {
        "get": {
            "summary": "the model versions served (to a known token, where tokens are on)",
            "tags": ["models"],
            "responses": {
                "200": {"description": "the models", "content": MODELS},
                "401": {"description": "tokens are on, and none known was sent", "content": error},
            },
        }
    }
    if libretranslate:
        paths |= LIBRETRANSLATE_PATHS
        schemas |= LIBRETRANSLATE_SCHEMAS
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "attnserve",
            "version": "v1",
            "description": "The gRPC contract attnserve.v1 as JSON, and LibreTranslate's API.",
        },
        "paths": paths,
        "components": {"schemas": schemas},
    }
