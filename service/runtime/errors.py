"""One error type per failure kind; the gRPC layer maps each to a status code in one place."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error the service reports to a client."""


class InvalidArgument(ServiceError):
    """The request itself is wrong (bad field value, empty text, too long)."""


class NotFound(ServiceError):
    """The request names a model or version that is not loaded."""


class ModelRepositoryError(ServiceError):
    """A model repository is unreadable, of an unknown format, or fails its checks."""


class Unavailable(ServiceError):
    """The server cannot answer now (draining, a worker died with the request in flight)."""


class ResourceExhausted(ServiceError):
    """The server is at a configured limit (queue full); retry later."""


class DeadlineExceeded(ServiceError):
    """The request's deadline passed before its decode finished."""


class Cancelled(ServiceError):
    """The client cancelled the request."""


class Internal(ServiceError):
    """The server failed the request by a fault of its own (a job's decode raised); the rest
    of what it serves goes on."""


ERRORS = {
    kind.__name__: kind
    for kind in (
        InvalidArgument,
        NotFound,
        ModelRepositoryError,
        Unavailable,
        ResourceExhausted,
        DeadlineExceeded,
        Cancelled,
        Internal,
    )
}
