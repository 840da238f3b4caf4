"""The peer, side by side: LibreTranslate 1.9.6 serving this repository's translator (its
weights as an Argos package: CTranslate2 int8 and the SentencePiece model) against attnserve's
HTTP APIs and gRPC on the same machine, one server at a time (`python -m bench.peers`).

LibreTranslate lives in `bench/peers/.venv` (`bash bench/peers/setup.sh`), never among the
project's dependencies: `bench.peers.package` builds its package, `bench.peers.libre` starts
it on 127.0.0.1 with nothing fetched at run time, `bench.peers.loads` sends the traffic,
`bench.peers.report` turns the figures into the goals' ratios and the table.
"""
