"""Every list of choices a setting of the runtime takes, once: a `Literal` type and its tuple.

The server's configuration (service.front.config) validates against these tuples and the
command line offers them; the engine and the scheduler check their own arguments by them.
"""

from __future__ import annotations

from typing import Literal, get_args

Device = Literal["cpu", "cuda"]  # where onnxruntime runs
DEVICES: tuple[Device, ...] = get_args(Device)
Variant = Literal["fp32", "int8", "fp16"]  # a model version's graphs, by precision
VARIANTS: tuple[Variant, ...] = get_args(Variant)
Cache = Literal["in_place", "growing", "static"]  # how a step carries its keys and values
CACHES: tuple[Cache, ...] = get_args(Cache)
Batching = Literal["continuous", "request"]  # iteration-level, or collect then decode
BATCHING: tuple[Batching, ...] = get_args(Batching)
Threading = Literal["thread", "inline"]  # where the encoder, or the step, runs
THREADING: tuple[Threading, ...] = get_args(Threading)
Auto = Literal["auto"]  # a setting the server chooses for the machine it runs on
AUTO: Auto = "auto"


def one_of(choices: tuple[str, ...]) -> str:
    """ "a, b or c" """
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
