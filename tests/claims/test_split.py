"""Splitting answers into claims and mapping each claim to its characters and tokens."""

from __future__ import annotations

import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Generation
from confide.scorers.claim_split import claim_prompt, sentence_spans, split_claims, token_spans


def _sentences(text):
    return [text[a:b] for a, b in sentence_spans(text)]


@pytest.mark.parametrize(("text", "expected"), [
    ("Paris is in France. It has 2.1 million people.",
     ["Paris is in France.", "It has 2.1 million people."]),
    ("Mr. Smith met Dr. Jones at 5 p.m. on Jan. 3. They talked.",
     ["Mr. Smith met Dr. Jones at 5 p.m. on Jan. 3.", "They talked."]),
    ("J. R. R. Tolkien wrote it. Really? Yes!", ["J. R. R. Tolkien wrote it.", "Really?", "Yes!"]),
    ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
    ("It costs approx. two euros, e.g. at a café.",
     ["It costs approx. two euros, e.g. at a café."]),
    ("- First point\n- Second point.\n1. Third", ["First point", "Second point.", "Third"]),
    ("Zürich liegt in der Schweiz. Ça va très bien… Über alles.",
     ["Zürich liegt in der Schweiz.", "Ça va très bien…", "Über alles."]),
    ("東京は日本の首都です。人口は多い！本当？",
     ["東京は日本の首都です。", "人口は多い！", "本当？"]),
    ("Emoji 🗼 stand here. Then more 🇫🇷 flags.", ["Emoji 🗼 stand here.", "Then more 🇫🇷 flags."]),
    ("   ", []),
])
def test_sentence_spans_split_on_sentence_ends_only(text, expected):
    assert _sentences(text) == expected


def test_sentence_spans_index_the_original_text():
    text = "  Café au lait. Ünïcödé text here!  "
    for a, b in sentence_spans(text):
        assert text[a:b] == text[a:b].strip() and text[a:b]


def test_token_spans_cover_characters_split_over_tokens():
    # "é" cut over two byte tokens: each decodes as U+FFFD; both map onto "é".
    pieces = ["Caf", "\ufffd", "\ufffd", " is", " open", "."]
    assert token_spans("Café is open.", pieces) == [(0, 3), (3, 4), (3, 4), (4, 7), (7, 12),
                                                    (12, 13)]


def test_token_spans_skip_trimmed_white_space():
    assert token_spans("Paris.", [" Paris", "."]) == [(0, 5), (5, 6)]


def test_split_claims_maps_claims_to_spans_and_tokens():
    text = "Der Bär schläft. 東京は大きい。"
    pieces = ["Der", " B", "\ufffd", "\ufffd", "r", " schl", "\u00e4ft", ".", " 東京", "は",
              "大", "きい", "。"]
    claims = split_claims(Generation(text=text, tokens=pieces))
    assert [(c.text, text[c.start:c.end]) for c in claims] == [
        ("Der Bär schläft.", "Der Bär schläft."), ("東京は大きい。", "東京は大きい。")]
    assert claims[0].tokens == list(range(8)) and claims[1].tokens == list(range(8, 13))


def test_split_claims_of_plain_text_have_no_tokens():
    claims = split_claims("One. Two.")
    assert [(c.start, c.end, c.tokens) for c in claims] == [(0, 4, []), (5, 9, [])]
    assert split_claims("") == []


def test_split_claims_refuses_unknown_splitter_and_model_without_backend():
    with pytest.raises(InvalidInputError, match="claim_splitter"):
        split_claims("One.", splitter="words")
    with pytest.raises(InvalidInputError, match="backend"):
        split_claims("One.", splitter="model")


def test_claim_prompt_in_chat_form():
    assert claim_prompt("Q?", "A.", chat=True)[0]["role"] == "user"


@pytest.mark.model
def test_model_splitter_places_listed_claims_on_answer_sentences(hf_model):
    # The bundled model lists claims in its own words; each kept claim sits on the answer
    # sentence that shares most words with it, and keeps that sentence's tokens.
    from confide.backends.base import GenerationSpec

    spec = GenerationSpec(max_new_tokens=40, stop=("\n\n",))
    gen = hf_model.generate(
        [[{"role": "user", "content": "Describe Paris in two sentences."}]], spec, [0])[0].greedy
    claims = split_claims(gen, splitter="model", backend=hf_model,
                          question="Describe Paris in two sentences.")
    spans = sentence_spans(gen.text)
    for claim in claims:
        assert (claim.start, claim.end) in spans
        covered = "".join(gen.tokens[t] for t in claim.tokens)
        assert gen.text[claim.start:claim.end].split()[0] in covered
