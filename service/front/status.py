"""The one place where the service's error types become gRPC status codes."""

from __future__ import annotations

import grpc

from service.runtime.errors import (
    Cancelled,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    ModelRepositoryError,
    NotFound,
    ResourceExhausted,
    ServiceError,
    Unavailable,
)

STATUS_CODES: dict[type[ServiceError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    ModelRepositoryError: grpc.StatusCode.FAILED_PRECONDITION,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    Cancelled: grpc.StatusCode.CANCELLED,
    Internal: grpc.StatusCode.INTERNAL,
}


def status_code(error: BaseException) -> grpc.StatusCode:
    """The code for an error; anything not a ServiceError is a bug of ours: INTERNAL."""
    for kind in type(error).__mro__:
        if kind in STATUS_CODES:
            return STATUS_CODES[kind]
    return grpc.StatusCode.INTERNAL
