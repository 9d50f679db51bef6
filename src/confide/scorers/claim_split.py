r"""Splitting a long answer into claims, each mapped to its characters and its tokens.

Two splitters:

``sentences`` (default, no model)
    One claim per sentence, found by :func:`sentence_spans`. No sentence
    splitter is a dependency of confide: NLTK's Punkt needs a model download
    that a clone without network cannot make, and spaCy would add hundreds of
    megabytes for one regular expression's work. The rule here is a careful
    regular expression: a sentence ends at ``.``, ``!``, ``?`` or ``…``
    (closing quotes and brackets kept with it) followed by white space, or at
    a full-width ``。！？`` or a line break; not after a known abbreviation
    (``Dr.``, ``e.g.``, ``etc.``, ...), a single-letter initial (``J. R. R.
    Tolkien``) or a dotted acronym (``U.S.``), and not before a lower-case
    word. Decimals (``3.14``) never split, as no space follows the point.
    List markers (``-``, ``*``, ``•``, ``1.``) at the start of a line are left
    out of the claim.
``model``
    Asks a model, through any backend, to list the answer's claims one per line
    (:func:`model_claims`), as FActScore and LM-Polygraph do. A listed claim is
    placed on the answer's sentence that shares most words with it (token F1),
    so it keeps a span and tokens of the answer; a claim that shares no word
    with the answer is dropped (it is not the answer's claim).

Token mapping (:func:`token_spans`): backends give each answer token's text
piece. Joined, the pieces equal the answer up to white space trimmed at the
ends and a multi-byte character cut across tokens (each piece then decodes as
U+FFFD). The pieces are aligned to the answer with :class:`difflib.SequenceMatcher`,
so every token gets a character span even then, and a claim's tokens are those
whose span overlaps the claim's.

References: [1] Min et al., 2023, "FActScore: Fine-grained Atomic Evaluation of
Factual Precision in Long Form Text Generation", EMNLP (atomic facts listed
by a model). [2] Fadeeva et al., 2024, "Fact-Checking the Output of Large
Language Models via Token-Level Uncertainty Quantification", ACL Findings
(claims mapped to the answer's tokens).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from confide.backends.base import Backend, GenerationSpec, HasChatTemplate
from confide.core.errors import InvalidInputError
from confide.core.options import CHOICES, check_choice
from confide.core.records import Claim, Generation
from confide.core.spans import token_spans
from confide.text import answer_tokens, token_f1

__all__ = ["SPLITTERS", "claim_prompt", "model_claims", "sentence_spans", "split_claims",
           "token_spans"]

SPLITTERS = CHOICES["claim_splitter"]

# Lower-case, without the final point. Titles, Latin and common short forms.
_ABBREVIATIONS = frozenset("""
mr mrs ms dr prof sr jr st mt ft vs etc e.g i.e cf al approx ca no nos fig figs vol vols
ed eds p pp inc ltd co corp dept est jan feb mar apr jun jul aug sep sept oct nov dec
gen col lt sgt capt rev hon gov sen rep pres a.m p.m
""".split())

_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019\u00bb)\]]*(?=\s|$)|[\u3002\uff01\uff1f]+"
                  r"[\u300d\u300f\uff09]*")
_CLOSERS = "\"')]\u201d\u2019\u00bb"
_LIST_MARKER = re.compile(r"(?:[-*\u2022\u2013]|\d{1,3}[.)])\s+")
_INITIAL_OR_ACRONYM = re.compile(r"^(?:[A-Za-z]\.)*[A-Za-z]$")


def _is_abbreviation(before: str) -> bool:
    word = before.rsplit(None, 1)[-1] if before.strip() else ""
    word = word.lstrip("([\"'\u201c\u2018")
    return word.lower() in _ABBREVIATIONS or bool(_INITIAL_OR_ACRONYM.match(word))


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    marker = _LIST_MARKER.match(text, start, end)
    if marker and marker.end() < end:
        start = marker.end()
    return start, end


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans ``[start, end)`` of the sentences of ``text`` (rule: module notes).

    Spans hold no leading or trailing white space; empty sentences are dropped.

    >>> t = "Dr. Smith paid $3.50 in the U.S. today. Really?  Yes!"
    >>> [t[a:b] for a, b in sentence_spans(t)]
    ['Dr. Smith paid $3.50 in the U.S. today.', 'Really?', 'Yes!']
    >>> t = "東京は日本の首都です。人口は多い。"
    >>> [t[a:b] for a, b in sentence_spans(t)]
    ['東京は日本の首都です。', '人口は多い。']
    """
    cuts: list[int] = []
    for line in re.finditer(r"[^\n]+", text):
        start = line.start()
        for m in _END.finditer(text, line.start(), line.end()):
            latin = m.group()[0] in ".!?\u2026"
            single_point = m.group().rstrip(_CLOSERS) == "."
            if latin and single_point and _is_abbreviation(text[start:m.start()]):
                continue
            if latin and re.fullmatch(r"\s*\d{1,3}", text[line.start():m.start()]):
                continue  # "1. Third": a numbered list's marker, not a sentence
            rest = text[m.end():line.end()].lstrip()
            if latin and rest and rest[0].islower():
                continue  # "approx. two", "e.g. this": not a sentence start
            cuts.append(m.end())
            start = m.end()
        cuts.append(line.end())
    spans, start = [], 0
    for cut in sorted(set(cuts)):
        a, b = _trim(text, start, cut)
        if b > a:
            spans.append((a, b))
        start = cut
    return spans


def _tokens_in(span: tuple[int, int], spans: Sequence[tuple[int, int]]) -> list[int]:
    a, b = span
    return [t for t, (s, e) in enumerate(spans) if s < b and e > a and e > s]


def _claims_on(text: str, spans: list[tuple[int, int]], claim_texts: list[str] | None,
               tokens: list[tuple[int, int]]) -> list[Claim]:
    if claim_texts is None:
        return [Claim(text[a:b], a, b, _tokens_in((a, b), tokens)) for a, b in spans]
    sentence_words = [answer_tokens(text[a:b]) for a, b in spans]
    claims = []
    for listed in claim_texts:
        words = answer_tokens(listed)
        overlap = [token_f1(words, s) for s in sentence_words]
        if not overlap or max(overlap) == 0.0:
            continue
        a, b = spans[overlap.index(max(overlap))]
        claims.append(Claim(listed, a, b, _tokens_in((a, b), tokens)))
    return claims


def split_claims(answer: Generation | str, *, splitter: str = "sentences",
                 backend: Backend | None = None, question: str = "") -> list[Claim]:
    """The claims of ``answer``, each with its character span and answer tokens.

    Parameters
    ----------
    answer : Generation or str
        A generation maps claims to its tokens; plain text gives claims
        without tokens.
    splitter : {"sentences", "model"}, default "sentences"
    backend : Backend, optional
        The model that lists the claims (``splitter="model"``).
    question : str
        The question answered, shown to the model that lists claims.

    Returns
    -------
    list of :class:`~confide.core.records.Claim`, in answer order; empty for an
    empty answer.

    >>> [(c.text, c.start, c.end) for c in split_claims("Paris is in France. It is big.")]
    [('Paris is in France.', 0, 19), ('It is big.', 20, 30)]
    """
    check_choice("claim_splitter", splitter)
    gen = answer if isinstance(answer, Generation) else Generation(text=answer)
    text = gen.text
    if not text.strip():
        return []
    spans = sentence_spans(text)
    tokens = token_spans(text, gen.tokens) if gen.tokens else []
    listed = None
    if splitter == "model":
        if backend is None:
            raise InvalidInputError("the model splitter needs a backend", field="claim_splitter")
        listed = model_claims(backend, [(question, text)])[0]
    return _claims_on(text, spans, listed, tokens)


def claim_prompt(question: str, answer: str, *, chat: bool) -> Any:
    """The request to list an answer's claims, one per line.

    >>> print(claim_prompt("Where is Paris?", "Paris is in France.", chat=False))
    ... # doctest: +NORMALIZE_WHITESPACE
    List every factual claim made in the answer below, one per line, each a short
    sentence that stands on its own. Do not add claims the answer does not make.
    Question: Where is Paris?
    Answer: Paris is in France.
    Claims:
    -
    """
    text = ("List every factual claim made in the answer below, one per line, each a short "
            "sentence that stands on its own. Do not add claims the answer does not make.\n"
            f"Question: {question}\nAnswer: {answer}")
    if chat:
        return [{"role": "user", "content": text}]
    return text + "\nClaims:\n-"


def model_claims(backend: Backend, pairs: list[tuple[str, str]], *,
                 max_new_tokens: int = 160) -> list[list[str]]:
    """The claims a model lists for each ``(question, answer)``, greedy, in one batch.

    Lines are stripped of list markers; empty lines are dropped.
    """
    chat = isinstance(backend, HasChatTemplate) and bool(backend.has_chat_template)
    prompts = [claim_prompt(q, a, chat=chat) for q, a in pairs]
    spec = GenerationSpec(max_new_tokens=max_new_tokens, stop=("\n\n",), top_k_alternatives=0)
    results = backend.generate(prompts, spec, [0] * len(prompts))
    out = []
    for result in results:
        reply = result.greedy.text if result.greedy is not None else ""
        lines = []
        for line in reply.splitlines():
            line = _LIST_MARKER.sub("", line.strip(), count=1).strip()
            if line:
                lines.append(line)
        out.append(lines)
    return out
