"""The one choice of how a step carries its key/value cache (service.runtime.cache_choice), as
the engine's default, the worker and `serve --print-config` all take it."""

from __future__ import annotations

import pytest

from service.front.config import cache_line
from service.runtime.cache_choice import CacheChoice, choose_cache

EVERY = frozenset({"growing", "in_place", "static"})
INT8 = frozenset({"growing", "in_place"})  # no static step: CUDA graphs replay float steps
CAPTIONER = frozenset({"growing"})


def test_auto_writes_in_place_on_the_cpu_where_shipped_else_grows():
    assert choose_cache("auto", "cpu", EVERY) == CacheChoice("in_place", "the default on cpu")
    assert choose_cache("auto", "cpu", CAPTIONER) == CacheChoice("growing", "the default on cpu")


def test_auto_on_cuda_grows_and_tries_the_static_step_where_shipped():
    assert choose_cache("auto", "cuda", EVERY) == CacheChoice(
        "growing", "the default on cuda", trial="static"
    )
    assert choose_cache("auto", "cuda", INT8).trial is None


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_configured_cache_applies_where_shipped_else_the_default_without_a_trial(device):
    for setting in ("growing", "in_place", "static"):
        assert choose_cache(setting, device, EVERY) == CacheChoice(
            setting, "set by the configuration"
        )
    fallen = choose_cache("static", device, INT8)
    default = choose_cache("auto", device, INT8)
    assert (fallen.cache, fallen.trial) == (default.cache, None)
    assert fallen.reason == "static asked for, but this version ships no such step"


def test_the_printed_rule_is_the_choice_over_every_version():
    rule = choose_cache("auto", "cuda")
    assert (rule.cache, rule.trial) == ("growing", "static")
    assert cache_line("auto", "cuda") == f"cache auto on cuda: {rule.reason}"
    assert cache_line("static", "cpu").endswith("a version without that step keeps its default)")
