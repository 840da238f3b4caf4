"""The HTTP server of a front: a Starlette app on uvicorn, on the front's own event loop, on
its own port (`http_listen`; several fronts share it as they share the gRPC port), with the
gRPC server's TLS settings, under the root path a proxy serves it at (`http_root_path`: the
proxy strips it, the links the server writes carry it; a path that still carries it is served
too). Any origin may call it from a
browser (CORS), as LibreTranslate allows: a call carries its token in a header, never in a
cookie."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from pathlib import Path

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.staticfiles import StaticFiles

from service.front.config import MAX_RECEIVE_BYTES, cannot_listen, forwarded_allow_ips
from service.front.http.calls import error_response
from service.front.http.contract import ContractApi
from service.front.http.libretranslate import LibreTranslateApi
from service.front.http.openapi import openapi_document
from service.front.servicer import ModelServicer

log = logging.getLogger("attnserve")
PAGE = Path(__file__).parent / "page"
MAX_BODY = MAX_RECEIVE_BYTES * 3 // 2  # a gRPC message at most, its bytes in base64
# what a browser's preflight may ask for: the calls' methods and the headers they read
CORS = Middleware(
    CORSMiddleware,
    allow_origins=["*"],
    allow_methods=["GET", "POST"],
    allow_headers=["Authorization", "Content-Type", "X-Request-Timeout"],
)


def build_app(front, servicers: list[ModelServicer], tokens, refused, files: Path) -> Starlette:
    """The routes: /v1 (the contract), LibreTranslate's, the page and the API's document."""
    contract = ContractApi(front, servicers, tokens, refused, MAX_BODY)
    routes = contract.routes()
    translation = [s for s in servicers if s.service == "attnserve.v1.TranslationService"]
    if translation:
        libre = LibreTranslateApi(front, translation[0], tokens, refused, files, MAX_BODY)
        routes += libre.routes()
    document = openapi_document(contract.endpoints, bool(translation))

    async def openapi(request) -> Response:
        # a client of the document calls its paths under the root path it was read at
        return JSONResponse(document | {"servers": [{"url": _root(request) or "/"}]})

    async def docs(request) -> Response:
        return RedirectResponse(_root(request) + "/page/docs.html")

    async def index(request) -> Response:
        return RedirectResponse(_root(request) + "/page/index.html")

    routes += [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/spec", openapi, methods=["GET"]),  # where LibreTranslate serves its own
        Route("/docs", docs, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        Mount("/page", StaticFiles(directory=PAGE), name="page"),
    ]
    return Starlette(
        routes=routes,
        middleware=[CORS, Middleware(Faults), Middleware(RootPathKept, routes=routes)],
        exception_handlers={HTTPException: _http_error},
    )


def _root(request) -> str:
    """The path the app is served at ("" at the root, "/attnserve" behind a proxy there)."""
    return request.scope.get("root_path", "")


class RootPathKept:
    """Serves a request whose path still starts with the root path (a proxy that passes it on
    unstripped, a client calling the server at a link it wrote, which carries the root path)
    as the request without it. A path that some route takes as it came is served as it came,
    so a stripped path that happens to start with the root path keeps its meaning."""

    def __init__(self, app, routes: list[BaseRoute]):
        self.app, self.routes = app, routes

    async def __call__(self, scope, receive, send) -> None:
        root = scope.get("root_path", "")
        if scope["type"] == "http" and root and self._doubled(scope, root):
            # uvicorn writes the root path before the path it received: take off one
            scope = dict(scope, path=scope["path"].removeprefix(root))
            raw = scope.get("raw_path") or b""
            scope["raw_path"] = raw.removeprefix(root.encode())
        await self.app(scope, receive, send)

    def _doubled(self, scope, root: str) -> bool:
        """Whether the path the routes match (past the root path uvicorn wrote first) starts
        with the root path again and no route takes it as it is: the routes are matched only
        for such a path, not for every request."""
        path = scope["path"]
        path = path[len(root) :] if path.startswith(root + "/") else path
        if path != root and not path.startswith(root + "/"):
            return False
        return all(route.matches(scope)[0] is Match.NONE for route in self.routes)


# a route /v1 lacks, or a method it does not take: gRPC's status for it, by HTTP status
ROUTE_STATUS = {404: grpc.StatusCode.NOT_FOUND, 405: grpc.StatusCode.UNIMPLEMENTED}


async def _http_error(request, failed: HTTPException) -> Response:
    """Starlette's own refusals (no such route, a method a route does not take, a form it
    cannot read) in JSON as each API writes its errors."""
    code = ROUTE_STATUS.get(failed.status_code, grpc.StatusCode.INVALID_ARGUMENT)
    return _api_error(request, code, failed.status_code, failed.detail, failed.headers)


def _api_error(request, code: grpc.StatusCode, status: int, detail: str, headers=None):
    """An error as the request's API writes one: under /v1 the contract's (`code`), else
    LibreTranslate's (`{"error": ...}`)."""
    if not request.url.path.removeprefix(_root(request)).startswith("/v1/"):
        return JSONResponse({"error": detail}, status_code=status, headers=headers)
    return error_response(code, f"{request.method} {request.url.path}: {detail}", status, headers)


class Faults:
    """A fault a route raised, before its answer began: logged with its traceback and
    answered 500 in its API's JSON (INTERNAL under /v1), inside the CORS middleware, so a
    page elsewhere reads the error rather than a refusal of its origin."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            if started:
                raise
            log.exception("HTTP %s %s", scope["method"], scope["path"])
            answer = _api_error(Request(scope), grpc.StatusCode.INTERNAL, 500, "internal error")
            await answer(scope, receive, send)


def http_socket(listen: str, reuse_port: bool) -> socket.socket:
    """A listening socket on HOST:PORT (port 0: the OS chooses); with `reuse_port` several
    fronts bind the same port and the kernel spreads connections over them."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # a response goes out as headers then body: without TCP_NODELAY (which accepted
    # connections inherit) the body waits for the client's delayed ACK, some 40 ms
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, int(port)))
    except OSError as error:  # in use, or not an address of this machine
        sock.close()
        raise cannot_listen("http_listen", listen, error.strerror) from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


class _Uvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        """Takes no signals: the front owns SIGTERM and SIGINT, and drains before this
        server stops."""
        yield


class HttpServer:
    """uvicorn serving `app` on a socket of its own, as a task of the running loop."""

    def __init__(self, app: Starlette, config, reuse_port: bool):
        self.socket = http_socket(config.http_listen, reuse_port)
        tls = {}
        if config.tls_cert is not None:
            tls = {"ssl_certfile": str(config.tls_cert), "ssl_keyfile": str(config.tls_key)}
            if config.tls_client_ca is not None:
                tls |= {
                    "ssl_ca_certs": str(config.tls_client_ca),
                    "ssl_cert_reqs": ssl.CERT_REQUIRED,
                }
        settings = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=1,
            root_path=config.http_root_path,
            forwarded_allow_ips=forwarded_allow_ips(config.http_trusted_proxies),
            **tls,
        )
        self.server = _Uvicorn(settings)
        self.task: asyncio.Task | None = None

    @property
    def port(self) -> int:
        return self.socket.getsockname()[1]

    async def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self.server.serve([self.socket]))
        while not self.server.started and not self.task.done():
            await asyncio.sleep(0.01)
        if self.task.done():
            self.task.result()  # raises what stopped it

    async def stop(self) -> None:
        """Stops taking connections and closes those it has (their calls have drained)."""
        if self.task is None:
            return
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.socket.close()
