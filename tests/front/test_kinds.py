"""What the front declares rather than guesses: each service's default model, the kind of a
model version, the messages between processes."""

from __future__ import annotations

import pickle
from dataclasses import FrozenInstanceError, replace

import pytest

from service.front.config import ServerConfig
from service.front.registry import CAPTION_SERVICE, TRANSLATION_SERVICE, default_models
from service.runtime.errors import InvalidArgument, ModelRepositoryError
from service.runtime.kinds import kind_class
from service.worker.messages import Failure, Partial, Report, Submit


def _models(translators: list[str], captioners: list[str]) -> dict:
    models = {TRANSLATION_SERVICE: {n: {"1": None} for n in translators}}
    if captioners:
        models[CAPTION_SERVICE] = {n: {"1": None} for n in captioners}
    return models


def test_a_service_with_one_model_defaults_to_it_whatever_the_names_sort_as():
    defaults = default_models(ServerConfig(), _models(["translator"], ["a-captioner"]))
    assert defaults == {TRANSLATION_SERVICE: "translator", CAPTION_SERVICE: "a-captioner"}


def test_several_models_need_a_declared_default():
    models = _models(["bible", "modern"], ["captioner"])
    with pytest.raises(ModelRepositoryError, match="set default_translator to one of them"):
        default_models(ServerConfig(), models)
    config = replace(ServerConfig(), default_translator="modern")
    assert default_models(config, models)[TRANSLATION_SERVICE] == "modern"
    wrong = replace(ServerConfig(), default_translator="captioner")
    with pytest.raises(ModelRepositoryError, match="default_translator = 'captioner', not a"):
        default_models(wrong, models)


def test_every_manifest_kind_has_one_module_and_an_unknown_kind_is_refused():
    assert kind_class("transformer").service == TRANSLATION_SERVICE
    assert kind_class("captioner").service == CAPTION_SERVICE
    with pytest.raises(ModelRepositoryError, match="unknown model kind 'speech'"):
        kind_class("speech")


def test_messages_are_frozen_and_cross_a_pipe_intact():
    report = Report(
        "captioner/1",
        [Partial(3, 1, [7, 8], 2), Failure(4, "InvalidArgument", "images[0]: empty")],
        None,
        5,
        1,
    )
    copy = pickle.loads(pickle.dumps(report))
    assert copy == report and copy.events[0].new == [7, 8]
    error = copy.events[1].error()
    assert isinstance(error, InvalidArgument) and str(error) == "images[0]: empty"
    with pytest.raises(FrozenInstanceError):
        copy.rows = 0  # type: ignore[misc]
    assert isinstance(pickle.loads(pickle.dumps(Submit("t/1", None))), Submit)


def test_a_request_is_cut_into_jobs_that_each_fit_a_batch():
    import numpy as np

    from service.front.state import Front
    from service.runtime.decoding import DecodingOptions
    from service.runtime.kinds import Prepared

    class Pool:
        ids = iter(range(1, 100))

        def next_id(self):
            return next(self.ids)

    class Context:
        def time_remaining(self):
            return None

    config = replace(ServerConfig(), max_batch_rows=8)
    front = Front(config, _models(["translator"], []), Pool(), None)
    ids = np.arange(10 * 3).reshape(10, 3)
    prepared = Prepared(
        {"src_ids": ids}, DecodingOptions(beam_size=3), [f"texts[{i}]" for i in range(10)]
    )
    jobs = front.jobs(prepared, Context(), stream=False)
    assert [j.inputs for j in jobs] == [2, 2, 2, 2, 2] and all(j.rows <= 8 for j in jobs)
    assert np.array_equal(np.concatenate([j.encoder_inputs["src_ids"] for j in jobs]), ids)
    assert len({j.id for j in jobs}) == 5
    wide = Prepared({"src_ids": ids}, DecodingOptions(beam_size=9), ["texts[0]"] * 10)
    with pytest.raises(
        InvalidArgument, match="9 hypotheses per input need 9 batch rows, at most 8"
    ):
        front.jobs(wide, Context(), stream=False)


def test_a_request_naming_languages_goes_to_the_model_that_covers_them():
    """Front.named / covering: the most specialised model first, then the default; a
    request naming a model is never rerouted; no model covering the pair is refused."""
    from types import SimpleNamespace

    from service.front.state import Front
    from service.runtime.languages import Languages

    def served(source, target):
        return {"1": SimpleNamespace(languages=Languages(tuple(source), tuple(target)))}

    many = [f"l{i}" for i in range(10)] + ["es", "en", "de", "fr"]
    models = {
        TRANSLATION_SERVICE: {
            "translator": served(["es"], ["en"]),
            "opus-es-de": served(["es"], ["de"]),
            "m2m100": served(many, many),
            "es-de-too": served(["es"], ["de"]),
        }
    }
    config = replace(ServerConfig(), default_translator="translator")
    front = Front(config, models, None, None)

    def named(**fields):
        request = SimpleNamespace(model="", source_language="", target_language="")
        request.__dict__.update(fields)
        return front.named(TRANSLATION_SERVICE, request)

    assert named() == ""  # the default, resolved later
    assert named(model="m2m100", target_language="de") == "m2m100"
    assert named(source_language="es", target_language="en") == "translator"
    assert named(source_language="es", target_language="de") == "es-de-too"  # by name, a tie
    assert named(target_language="fr") == "m2m100"
    assert named(source_language="l3") == "m2m100"
    with pytest.raises(InvalidArgument, match="no served model translates that"):
        named(source_language="tlh", target_language="en")


def test_a_model_that_declares_no_source_is_reached_after_those_that_do():
    """A model that names no source language (a Marian exported without `source_lang`)
    reads any, as its resolve_languages takes any: a request naming a source reaches it,
    but only where no model that declares the source covers the pair."""
    from types import SimpleNamespace

    from service.front.state import Front
    from service.runtime.languages import Languages

    def served(source, target):
        return {"1": SimpleNamespace(languages=Languages(tuple(source), tuple(target)))}

    models = {
        TRANSLATION_SERVICE: {
            "any-de": served([], ["de"]),
            "m2m100": served(["es", "en", "de", "fr"], ["es", "en", "de", "fr"]),
            "opus-es-de": served(["es"], ["de"]),
        }
    }
    front = Front(replace(ServerConfig(), default_translator="m2m100"), models, None, None)
    assert front.covering(TRANSLATION_SERVICE, "it", "de") == "any-de"
    assert front.covering(TRANSLATION_SERVICE, "es", "de") == "opus-es-de"
    assert front.covering(TRANSLATION_SERVICE, "fr", "de") == "m2m100"  # it declares French
    assert front.covering(TRANSLATION_SERVICE, "", "de") == "opus-es-de"
    with pytest.raises(InvalidArgument, match="no served model translates that"):
        front.covering(TRANSLATION_SERVICE, "it", "fr")
