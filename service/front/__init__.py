"""The front process: gRPC (`server`), a module per gRPC service (`translate`, `caption`,
with `decoding` for the messages they share) that parses its request messages into the
runtime's typed requests and writes the runtime's results as its responses, the calls over
any service (`servicer`), its configuration, admission control, metrics, security, model
versions, and the worker processes it starts and restarts (`pool`); with several fronts, how
they share the workers (`fronts`)."""
