"""The runtime's lists of choices: each tuple is its Literal's values, and `one_of` says them
as a message does."""

from __future__ import annotations

from typing import get_args

import pytest

from service.runtime import choices
from service.runtime.choices import one_of


@pytest.mark.parametrize(
    ("literal", "values", "expected"),
    [
        (choices.Device, choices.DEVICES, ("cpu", "cuda")),
        (choices.Variant, choices.VARIANTS, ("fp32", "int8", "fp16")),
        (choices.Cache, choices.CACHES, ("in_place", "growing", "static")),
        (choices.Batching, choices.BATCHING, ("continuous", "request")),
        (choices.Threading, choices.THREADING, ("thread", "inline")),
    ],
)
def test_each_tuple_holds_its_literal_values_in_order(literal, values, expected):
    assert values == get_args(literal) == expected
    assert len(set(values)) == len(values)


def test_auto_is_a_value_no_list_of_choices_holds():
    assert get_args(choices.Auto) == (choices.AUTO,) == ("auto",)
    for values in (choices.DEVICES, choices.VARIANTS, choices.CACHES, choices.BATCHING):
        assert choices.AUTO not in values


def test_one_of_lists_choices_as_a_sentence():
    assert one_of(("cpu",)) == "cpu"
    assert one_of(("cpu", "cuda")) == "cpu or cuda"
    assert one_of(choices.CACHES) == "in_place, growing or static"
    assert one_of(("a", "b", "c", "d")) == "a, b, c or d"
