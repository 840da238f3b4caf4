"""The front process: gRPC (`server`), its configuration, admission control, metrics,
security, model versions, and the worker processes it starts and restarts (`pool`); with
several fronts, how they share the workers (`fronts`)."""
