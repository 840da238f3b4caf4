"""The torch-free side of attnserve, in layers that import only downwards: `front` (the gRPC
front processes) above `worker` (the worker processes) above `runtime` (the library every
process shares); `client` (the gRPC client) apart, above the runtime only; `paths` (paths as
text any output can carry) apart, importing nothing of the project."""
