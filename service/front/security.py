"""TLS, mutual TLS and bearer tokens for the gRPC server.

Tokens come from `auth_tokens` (the setting, e.g. ATTNSERVE_AUTH_TOKENS) and from the lines
of `auth_tokens_file`, in one form: `TOKEN` (every service) or `TOKEN SERVICE[,SERVICE...]`
(only those; a service by its full name, attnserve.v1.TranslationService, or its short one,
translation or caption); `#` starts a comment. A call carries `authorization: Bearer TOKEN`.
No token, or one that is not known: UNAUTHENTICATED; a known token used on a service outside
its list: PERMISSION_DENIED. Tokens are kept as SHA-256 digests and a presented token is
compared with every one of them in constant time. The health service stays open, so probes
need no token; reflection takes any known token, whatever its services.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection

from service.runtime.errors import InvalidArgument

OPEN_SERVICES = frozenset({"grpc.health.v1.Health"})
# what every known token may call, whatever services it names: the contract, which a client
# such as grpcurl reads before it calls the services the token allows
ANY_TOKEN_SERVICES = frozenset({reflection.SERVICE_NAME})
SHORT_NAMES = {
    "translation": "attnserve.v1.TranslationService",
    "caption": "attnserve.v1.CaptionService",
}
EVERY_SERVICE = None  # the scope of a token given without a service list
GRPC_TOKEN = "the metadata 'authorization: Bearer TOKEN'"


@dataclass(frozen=True)
class Token:
    digest: bytes
    services: frozenset[str] | None  # None: every service


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_tokens(text: str, where: str) -> list[Token]:
    """Tokens of `text`: one entry a line (or separated by `;` in a setting)."""
    tokens = []
    for number, line in enumerate(text.replace(";", "\n").splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 2:
            raise InvalidArgument(f"{where}, entry {number}: TOKEN [SERVICE,...] expected")
        secret, services = fields[0], EVERY_SERVICE
        if len(secret) < 16:
            raise InvalidArgument(f"{where}, entry {number}: a token has 16 characters or more")
        if len(fields) == 2:
            names = [SHORT_NAMES.get(n, n) for n in fields[1].split(",") if n]
            unknown = [n for n in names if n not in SHORT_NAMES.values()]
            if unknown or not names:
                raise InvalidArgument(
                    f"{where}, entry {number}: unknown services {unknown}; known: "
                    f"{sorted(SHORT_NAMES)} or {sorted(SHORT_NAMES.values())}"
                )
            services = frozenset(names)
        tokens.append(Token(_digest(secret), services))
    return tokens


def load_tokens(config) -> list[Token]:
    """The tokens of the configuration; none: authentication is off."""
    tokens = parse_tokens(config.auth_tokens, "auth_tokens")
    if config.auth_tokens_file is not None:
        path = Path(config.auth_tokens_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument(f"auth_tokens_file {path}: {error}") from error
        tokens += parse_tokens(text, f"auth_tokens_file {path}")
    return tokens


def bearer(value: str | bytes | None) -> str | None:
    """The token of an `authorization` value `Bearer TOKEN`, or None."""
    if value is None:
        return None
    scheme, _, token = (value if isinstance(value, str) else value.decode()).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _bearer(metadata) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            return bearer(value)
    return None


def _match(tokens: list[Token], presented: str) -> Token | None:
    """The token equal to `presented`, comparing with every one (no early exit)."""
    digest, found = _digest(presented), None
    for token in tokens:
        if hmac.compare_digest(token.digest, digest):
            found = token
    return found


def refusal(
    tokens: list[Token], presented: str | None, service: str, how: str
) -> tuple[grpc.StatusCode, str] | None:
    """Why a call to `service` with the token `presented` is refused (its code and details),
    or None when it may go on; `how` says how a client sends a token (gRPC metadata, an HTTP
    header). Shared by every way in, so that each refuses alike."""
    token = None if presented is None else _match(tokens, presented)
    if token is None:
        why = "no bearer token" if presented is None else "the bearer token is not known"
        return grpc.StatusCode.UNAUTHENTICATED, f"{why}: send {how}"
    allowed = token.services is EVERY_SERVICE or service in token.services
    if not allowed and service not in ANY_TOKEN_SERVICES:
        return grpc.StatusCode.PERMISSION_DENIED, f"this token may not call {service}"
    return None


def _refusal(handler, code: grpc.StatusCode, details: str):
    """A handler of the same shape as `handler` that ends the call with `code`."""

    async def refuse(request, context):
        await context.abort(code, details)

    kind = (
        ("unary_unary", grpc.unary_unary_rpc_method_handler),
        ("unary_stream", grpc.unary_stream_rpc_method_handler),
        ("stream_unary", grpc.stream_unary_rpc_method_handler),
        ("stream_stream", grpc.stream_stream_rpc_method_handler),
    )
    for attribute, make in kind:
        if getattr(handler, attribute) is not None:
            return make(refuse, request_deserializer=None, response_serializer=None)
    raise AssertionError("a method handler of no known kind")


class TokenAuth(grpc.aio.ServerInterceptor):
    """Refuses calls without a known bearer token (health excepted); `refused(code)` is
    called for every refusal (a metric)."""

    def __init__(self, tokens: list[Token], refused=lambda code: None):
        self.tokens, self.refused = tokens, refused

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        service = details.method.strip("/").partition("/")[0]
        if handler is None or service in OPEN_SERVICES:
            return handler
        presented = _bearer(details.invocation_metadata)
        refused = refusal(self.tokens, presented, service, GRPC_TOKEN)
        if refused is not None:
            self.refused(refused[0])
            return _refusal(handler, *refused)
        return handler


def _read(path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise InvalidArgument(f"{what} {path}: {error}") from error


def tls_problems(config) -> list[str]:
    """The TLS settings that do not go together, each named."""
    problems = []
    if (config.tls_cert is None) != (config.tls_key is None):
        problems.append("tls_cert and tls_key go together")
    elif config.tls_cert is None and config.tls_client_ca is not None:
        problems.append("tls_client_ca needs tls_cert and tls_key")
    if (config.metrics_tls_cert is None) != (config.metrics_tls_key is None):
        problems.append("metrics_tls_cert and metrics_tls_key go together")
    return problems


def security_problems(config) -> list[str]:
    """What the server would refuse of the security settings (`tls_problems`, and tokens
    that cannot be read or are too short), each named: the configuration's own check
    (ServerConfig.problems), so that `serve --print-config` refuses what `serve` does."""
    problems = tls_problems(config)
    try:
        load_tokens(config)
    except InvalidArgument as error:
        problems.append(str(error))
    return problems


def server_credentials(config) -> grpc.ServerCredentials | None:
    """TLS credentials when `tls_cert` and `tls_key` are set (mutual TLS with
    `tls_client_ca`: a client must show a certificate that CA signed); None: plaintext."""
    if problems := tls_problems(config):
        raise InvalidArgument("configuration: " + "; ".join(problems))
    if config.tls_cert is None:
        return None
    pair = (_read(config.tls_key, "tls_key"), _read(config.tls_cert, "tls_cert"))
    client_ca = None
    if config.tls_client_ca is not None:
        client_ca = _read(config.tls_client_ca, "tls_client_ca")
    return grpc.ssl_server_credentials(
        [pair], root_certificates=client_ca, require_client_auth=client_ca is not None
    )
