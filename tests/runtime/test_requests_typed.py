"""The runtime's typed requests and the checks every way in shares: each problem names the
client's own field, and every problem of a request is raised at once."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from service.runtime.decoding import DecodingOptions
from service.runtime.errors import InvalidArgument
from service.runtime.requests import (
    MAX_SUPPRESS_TOKENS,
    MAX_TEXTS,
    CaptionRequest,
    DecodingRequest,
    ScoreRequest,
    TranslateRequest,
    check_text,
    check_texts,
    checked,
    raise_problems,
    writable,
)


def words(text: str) -> list[int]:
    """A stand-in tokenizer: one id a word (its length + 3)."""
    return [len(w) + 3 for w in text.split()]


def test_a_text_is_refused_empty_blank_or_too_long():
    problems: list[str] = []
    check_text("texts[0]", "", problems, 10)
    check_text("texts[1]", " \t\n", problems, 10)
    check_text("texts[2]", "x" * 11, problems, 10)
    check_text("texts[3]", "x" * 10, problems, 10)
    assert problems == [
        "texts[0]: empty or only white space",
        "texts[1]: empty or only white space",
        "texts[2]: 11 characters, at most 10",
    ]


def test_texts_need_one_at_least_and_a_field_named_already_is_not_checked_again():
    problems: list[str] = []
    check_texts([], [], problems, 10)
    assert problems == ["texts: at least one text is needed (texts or utf8_texts)"]
    problems = ["utf8_texts[1]: not UTF-8"]
    check_texts(["texts[0]", "utf8_texts[1]", "texts[2]"], ["ok", "", ""], problems, 10)
    assert problems == ["utf8_texts[1]: not UTF-8", "texts[2]: empty or only white space"]
    many = ["a"] * (MAX_TEXTS + 1)
    problems = []
    check_texts([f"texts[{i}]" for i in range(len(many))], many, problems, 10)
    assert problems == [f"texts: {MAX_TEXTS + 1} texts, at most {MAX_TEXTS} in one request"]
    with pytest.raises(ValueError):  # a field for every text
        check_texts(["texts[0]"], ["a", "b"], [], 10)


def test_checked_runs_every_check_and_raises_all_their_problems_at_once():
    def bad(message):
        def check():
            raise InvalidArgument(message)

        return check

    assert checked(lambda: 1, lambda: "two") == [1, "two"]
    ran = []
    with pytest.raises(InvalidArgument) as error:
        checked(bad("a: wrong"), lambda: ran.append(1), bad("b: wrong"))
    assert str(error.value) == "a: wrong; b: wrong"
    assert ran == [1]  # a check after a failed one still runs
    with pytest.raises(ValueError):  # only InvalidArgument is collected
        checked(lambda: int("x"))


def test_raise_problems_raises_only_when_there_are_some():
    raise_problems([])
    with pytest.raises(InvalidArgument, match=r"^x: 1; y: 2$"):
        raise_problems(["x: 1", "y: 2"])


def test_unset_fields_take_the_defaults_and_set_ones_are_kept():
    options = DecodingRequest().options(max_length_limit=64, default_max_length=32)
    assert options == DecodingOptions(max_length=32)
    request = DecodingRequest(
        beam_size=4, max_length=20, num_hypotheses=2, length_penalty=0.5, min_length=3
    )
    options = request.options(64, 32)
    assert (options.beam_size, options.max_length, options.num_hypotheses) == (4, 20, 2)
    assert (options.length_penalty, options.min_length) == (0.5, 3)
    assert options.top_p == DecodingOptions().top_p  # None: DecodingOptions' default


def test_every_bad_field_is_named_in_one_error():
    request = DecodingRequest(beam_size=0, max_length=100, suppress=("", "ok"))
    with pytest.raises(InvalidArgument) as error:
        request.options(64, 32, words)
    message = str(error.value)
    assert "beam_size must be in 1.." in message
    assert "max_length must be in 1..64, got 100" in message
    assert message.endswith("suppress[0]: empty or only white space")
    with pytest.raises(InvalidArgument, match="suppress: this model has no output tokenizer"):
        DecodingRequest(suppress=("word",)).options(64, 32)


def test_suppressed_phrases_become_token_sequences_once_each():
    request = DecodingRequest(suppress=("ab cde", "x", "ab  cde"))
    assert request.options(64, 32, words).suppress == ((5, 6), (4,))
    long = " ".join(["w"] * (MAX_SUPPRESS_TOKENS + 1))
    with pytest.raises(InvalidArgument, match=rf"suppress\[1\]: {MAX_SUPPRESS_TOKENS + 1} tokens"):
        DecodingRequest(suppress=("ok", long)).options(64, 32, words)


def test_a_target_prefix_is_tokenized_and_must_leave_room_for_one_step():
    assert DecodingRequest().prefix(words, 10) == ()
    assert DecodingRequest(target_prefix="hi there").prefix(words, 10) == (5, 8)
    with pytest.raises(InvalidArgument, match="target_prefix: only white space"):
        DecodingRequest(target_prefix="  ").prefix(words, 10)
    with pytest.raises(InvalidArgument, match=r"3 tokens, at most max_length - 1 \(2\)"):
        DecodingRequest(target_prefix="a b c").prefix(words, 3)
    assert DecodingRequest(target_prefix="a b").prefix(words, 3) == (4, 4)


def test_what_a_model_must_write_refuses_characters_its_vocabulary_lacks():
    """A target prefix or a suppressed word with characters a vocabulary without byte
    fallback lacks would be written as `<unk>`, which decoding drops: the prefix would lose
    them and the ban would ban `<unk>`. Both are refused, the characters named."""
    unknown = 3

    def encode(text: str) -> list[int]:  # ASCII words, <unk> for anything else
        return [unknown if not c.isascii() else 4 + len(c) for c in text.split()]

    written = writable(encode, unknown)
    assert DecodingRequest(target_prefix="Hello there").prefix(written, 10) == (9, 9)
    with pytest.raises(InvalidArgument, match="target_prefix: characters the model's vocab"):
        DecodingRequest(target_prefix="你好 Hello").prefix(written, 10)
    with pytest.raises(InvalidArgument, match=r"suppress\[1\]: .* '你' '好'"):
        DecodingRequest(suppress=("cat", "你好")).options(64, 32, written)
    assert DecodingRequest(suppress=("cat",)).options(64, 32, written).suppress == ((7,),)


def test_requests_are_frozen_values():
    options = DecodingOptions()
    translate = TranslateRequest(("hola",), ("texts[0]",), options)
    assert (translate.splitting, translate.text_format, translate.glossary) == (
        "sentences",
        "plain",
        (),
    )
    caption = CaptionRequest((b"png",), ("images[0]",), options)
    assert caption.prefix == () and not caption.return_attention
    score = ScoreRequest((("hola", "hello"),))
    for request, field in ((translate, "texts"), (caption, "images"), (score, "pairs")):
        with pytest.raises(FrozenInstanceError):
            setattr(request, field, ())
    assert TranslateRequest(("hola",), ("texts[0]",), options) == translate
