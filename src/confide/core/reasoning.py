r"""A reasoning model's reply as two spans: the trace, then the final answer.

A reply of a reasoning model (Qwen3 and DeepSeek-R1 in thinking mode, GPT-OSS) is a
chain of thought followed by the answer. confide keeps them apart on every path: the
:class:`~confide.core.records.Generation` *is* the final answer (its text and the
statistics of its tokens only) and :attr:`~confide.core.records.Generation.trace` is the
reasoning, a generation of its own. Everything that reads ``gen.text`` (graders,
equivalence judges, answer-level scorers) so reads the final answer.

Two sources of the split:

* **tags in the text** (:func:`split_reasoning`): ``<think>…</think>`` (configurable).
  The trace ends with the first closing tag; it begins at the reply's start, whether the
  reply opens it (it starts, white space aside, with the opening tag) or a chat template
  put the opening tag in the prompt (DeepSeek-R1, QwQ and the Qwen3 thinking models end
  the generation prompt with ``<think>\n``: the reply holds no opening tag). A reply
  that opens a trace and never closes it is all trace: its final answer is missing. So
  is a reply whose *prompt* opened the trace (``Generation.trace_opened``, set by the
  ``hf`` backend where the rendered prompt ends with the opening tag:
  :func:`prompt_opens_trace`) and that holds no closing tag: a thinking model cut by the
  token budget before it closed its trace, never an answer. A reply with neither tag,
  from a prompt that opened none, is left as it is (no trace).
* **a field of its own** (:func:`with_trace`): vLLM's and DeepSeek's
  ``reasoning_content``, OpenRouter's ``reasoning``, Ollama's ``thinking``.

Tokens
------
The tokens spell the reply. The trace keeps every token up to and including the one
that holds the last character of the closing tag: a token that straddles the tag (``>``
with the line break after it, or ``>The``) belongs to the trace, and the tag's own tokens
are the trace's too (they were generated; their statistics are part of reasoning). The
final answer keeps every token after it, white-space tokens at its start included, as a
generation keeps the white space before its first word; its text is stripped, as every
generation's is. Every per-token column (the token statistics, ``top_logprobs``,
``top_tokens``, ``token_ids``, ``tokens``, the ensemble members' statistics) is cut at
that token; pooled hidden states stay with the answer. The closing tag is found in the
joined tokens themselves; where it is not there verbatim (tokens that hold partial
bytes), the tokens are aligned to the text (:func:`confide.core.spans.token_spans`, the
claims' own mapping). A generation whose tokens are unknown (token ids without their
text) cannot be cut: both spans keep their text only.

A trace cut by the token budget (``finish_reason == "length"`` inside the trace) gives
a final answer with empty text, ``finish_reason`` ``"length"`` and the trace set:
:func:`final_answer_missing` says so, graders leave it ungraded with the reason
(:func:`missing_answer_reason`), and answer-level scorers give NaN for the empty answer
(:func:`confide.scorers.run_scorer`).

References
----------
[1] DeepSeek-AI, 2025, "DeepSeek-R1: Incentivizing Reasoning Capability in LLMs via
Reinforcement Learning", arXiv:2501.12948 (``<think>`` blocks, ``reasoning_content``).
[2] Yang et al., 2025, "Qwen3 Technical Report", arXiv:2505.09388 (thinking mode).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from confide.core.errors import InvalidInputError
from confide.core.needs import TOKEN_STATISTICS
from confide.core.records import Generation, MemberStatistics
from confide.core.spans import loose, spelled, token_spans

__all__ = ["DEFAULT_TAGS", "Tags", "final_answer_missing", "missing_answer_reason",
           "prompt_opens_trace", "reasoning_tags", "split_reasoning", "trace_split",
           "with_trace"]

Tags = tuple[str, str]
#: The tags of Qwen3, DeepSeek-R1 and most open reasoning models.
DEFAULT_TAGS: Tags = ("<think>", "</think>")
#: Words that turn tag splitting off (``--reasoning-tags none``).
_OFF = ("", "none", "off", "false", "no")
_COLUMNS = tuple(stat.value for stat in TOKEN_STATISTICS)


def reasoning_tags(value: str | Sequence[str] | None | bool) -> Tags | None:
    """The ``(opening, closing)`` tags a user named, or None for no tag splitting.

    ``"<think>,</think>"`` or a pair; None, False, ``""``, ``"none"`` or ``"off"`` turn
    splitting off. Tags must be two different non-empty texts without white space at
    their ends, and the closing tag may not lie inside the opening one.

    >>> reasoning_tags("<think>,</think>")
    ('<think>', '</think>')
    >>> reasoning_tags("none") is None
    True
    """
    if value is None or value is False:
        return None
    if isinstance(value, str):
        if value.strip().lower() in _OFF:
            return None
        parts: Sequence[Any] = value.split(",")
    elif isinstance(value, (list, tuple)):
        parts = value
    else:
        raise InvalidInputError(f"give two tags, '<open>,<close>', or 'none', not {value!r}",
                                field="reasoning_tags")
    if len(parts) != 2 or not all(isinstance(p, str) for p in parts):
        raise InvalidInputError(f"give two tags, '<open>,<close>', or 'none', not {value!r}",
                                field="reasoning_tags")
    opening, closing = parts
    if not opening or not closing or opening != opening.strip() or closing != closing.strip():
        raise InvalidInputError("a tag must be non-empty text without white space at its "
                                f"ends, not {value!r}", field="reasoning_tags")
    if closing in opening:
        raise InvalidInputError(f"the closing tag {closing!r} lies inside the opening tag "
                                f"{opening!r}: a reply could not tell them apart",
                                field="reasoning_tags")
    return opening, closing


def final_answer_missing(gen: Generation) -> bool:
    """Whether ``gen`` is a reasoning reply with no final answer: a trace, and no answer
    text after it (the token budget ran out inside the trace, or it was never closed).

    >>> final_answer_missing(Generation("", trace=Generation("Let me see")))
    True
    >>> final_answer_missing(Generation(""))  # no trace: an empty answer, not a cut trace
    False
    """
    return gen.trace is not None and gen.empty


def missing_answer_reason(gen: Generation) -> str | None:
    """Why ``gen`` has no final answer to grade (:func:`final_answer_missing`), or None."""
    if not final_answer_missing(gen):
        return None
    if gen.finish_reason == "length":
        return "no final answer: the token budget ran out inside the reasoning trace"
    return "no final answer after the reasoning trace"


def prompt_opens_trace(prompt_text: str, tags: Tags = DEFAULT_TAGS) -> bool:
    """Whether a rendered prompt ends, white space aside, with the opening tag: the model's
    reply then starts inside a trace (a chat template's thinking mode that writes the
    opening tag itself: DeepSeek-R1, QwQ, Qwen3's thinking models).

    >>> prompt_opens_trace("<|im_start|>assistant\\n<think>\\n")
    True
    >>> prompt_opens_trace("Answer: <think>2+2=4</think> 4\\n\\nAnswer:")  # k-shot exemplars
    False
    >>> prompt_opens_trace("<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n")  # thinking off
    False
    """
    return prompt_text.rstrip().endswith(tags[0])


def split_reasoning(gen: Generation, tags: Tags = DEFAULT_TAGS) -> Generation:
    """The final answer of ``gen`` with its reasoning trace split off by ``tags``.

    Parameters
    ----------
    gen : Generation
        A whole reply: its text and tokens hold the trace and the answer. A generation
        that already has a trace is returned as it is. ``gen.trace_opened``: its prompt
        ended with the opening tag, so the reply is a trace from its first token.
    tags : (str, str), default ``("<think>", "</think>")``
        The opening and closing tags (:func:`reasoning_tags` checks a user's).

    Returns
    -------
    Generation
        The final answer (text stripped, the tokens after the trace's last one) with
        ``trace`` set to the reasoning (text between the tags, stripped; the tokens up to
        the closing tag's last one). ``gen`` itself when its text holds no trace (module
        notes). A trace that is never closed gives an empty answer with the reply's
        ``finish_reason`` (``"length"`` when the budget ran out), as does the trace's own
        ``finish_reason``; a closed trace's is ``"stop"``. A reply whose prompt opened
        the trace and that holds no closing tag is such a trace too, never an answer.

    Examples
    --------
    >>> g = split_reasoning(Generation("<think>2+2 is 4</think>\\n\\n4",
    ...                                tokens=["<think>", "2+2 is 4", "</", "think>\\n\\n", "4"]))
    >>> g.text, g.tokens, g.trace.text, g.trace.tokens
    ('4', ['4'], '2+2 is 4', ['<think>', '2+2 is 4', '</', 'think>\\n\\n'])
    >>> split_reasoning(Generation("Paris")).trace is None
    True
    >>> cut = split_reasoning(Generation("Let me add 2 and", finish_reason="length",
    ...                                  trace_opened=True))  # the prompt ended with <think>
    >>> cut.text, cut.trace.text, final_answer_missing(cut)
    ('', 'Let me add 2 and', True)
    """
    opening, closing = tags
    if gen.trace is not None:
        return gen
    text = gen.text
    opened = text.lstrip().startswith(opening)  # the reply writes the opening tag itself
    start = len(text) - len(text.lstrip()) + len(opening) if opened else 0
    close = text.find(closing, start)
    if close < 0 and not opened and not gen.trace_opened:
        return gen
    reasoning = text[start:close] if close >= 0 else text[start:]
    answer = text[close + len(closing):] if close >= 0 else ""
    n = _trace_tokens(gen, text, tags, opened, close)
    return _parts(gen, n, answer.strip(), reasoning.strip())


def _trace_tokens(gen: Generation, text: str, tags: Tags, opened: bool, close: int
                  ) -> int | None:
    """How many of ``gen``'s tokens are the trace's (None: the tokens are unknown)."""
    tokens = gen.tokens
    if not tokens:
        return None if _token_data(gen) else 0
    if close < 0:
        return len(tokens)
    end = _closing_end(tokens, tags, opened)
    if end is not None:
        return end
    # not verbatim in the tokens (partial bytes around it): align the tokens to the text
    stop = close + len(tags[1])
    return sum(1 for a, _ in token_spans(text, tokens) if a < stop)


def _closing_end(tokens: Sequence[str], tags: Tags, opened: bool) -> int | None:
    """The number of tokens up to the one holding the closing tag's last character, or
    None when the joined tokens do not hold the tag."""
    opening, closing = tags
    joined = "".join(tokens)
    start = 0
    if opened:
        at = joined.find(opening)
        start = at + len(opening) if at >= 0 else 0
    at = joined.find(closing, start)
    if at < 0:
        return None
    last = at + len(closing)  # characters up to the tag's end
    pos = 0
    for i, token in enumerate(tokens):
        pos += len(token)
        if pos >= last:
            return i + 1
    return len(tokens)  # unreachable: the tag lies inside the joined tokens


def trace_split(tokens: Sequence[str], reasoning: str, answer: str,
                tags: Tags | None = DEFAULT_TAGS) -> int:
    """How many leading ``tokens`` are the trace's, for a reply whose reasoning and answer
    a source gives as two texts while its tokens cover both (or the answer alone).

    The first rule that holds decides: the joined tokens hold the closing tag (vLLM's
    log-probabilities with a reasoning parser: the trace ends with the token that ends
    it); they spell, white space aside, the reasoning (after the opening tag, if they
    hold it) and then the answer (the trace is the shortest prefix covering the
    reasoning); they spell a non-empty answer alone (0).

    Raises
    ------
    ValueError
        The tokens spell neither, or the trace's tokens do not hold the reasoning.

    >>> trace_split(["Hm", ", 4", "</think>", "\\n", "4"], "Hm, 4", "4")
    3
    >>> trace_split(["Hm", ", 4", "4"], "Hm, 4", "4", tags=None)
    2
    >>> trace_split(["4"], "Hm, 4", "4")
    0
    """
    pieces, partial = spelled(tokens)
    whole = loose("".join(pieces), ascii_only=partial)
    want_r, want_a = loose(reasoning, ascii_only=partial), loose(answer, ascii_only=partial)
    n: int | None = None
    if tags is not None:
        n = _closing_end(tokens, tags, "".join(tokens).lstrip().startswith(tags[0]))
        if n is not None and want_r not in loose("".join(pieces[:n]), ascii_only=partial):
            raise ValueError("the tokens up to the closing tag do not spell the reasoning")
    if n is None and want_r:
        # the reasoning, after its opening tag where the tokens hold one (a trace never closed)
        heads = [want_r] if tags is None else [want_r, loose(tags[0]) + want_r]
        head = next((h for h in heads if whole.startswith(h)), None)
        if head is not None:
            n = _covering(pieces, len(head), partial)
    if n is None:
        if whole.startswith(want_a) and (want_a or not whole):
            return 0
        raise ValueError("the tokens spell neither the reasoning followed by the answer nor "
                         "the answer alone")
    rest = loose("".join(pieces[n:]), ascii_only=partial)
    if not rest.startswith(want_a):
        raise ValueError("the tokens after the reasoning do not spell the answer")
    return n


def _covering(pieces: Sequence[str], length: int, partial: bool) -> int:
    """The fewest leading pieces whose text, white space aside, is ``length`` long."""
    if length <= 0:
        return 0
    covered = 0
    for n, piece in enumerate(pieces, start=1):
        covered += len(loose(piece, ascii_only=partial))
        if covered >= length:
            return n
    return len(pieces)


def with_trace(answer_text: str, reasoning_text: str, gen: Generation | None = None, *,
               tags: Tags | None = DEFAULT_TAGS, finish_reason: str | None = None
               ) -> Generation:
    """The final answer with its trace, for a source that gives the reasoning as a field
    of its own (``reasoning_content``, ``reasoning``, ``thinking``).

    Parameters
    ----------
    answer_text, reasoning_text : str
        The two texts as the source gives them (stripped here).
    gen : Generation, optional
        The reply's tokens and statistics: the trace's tokens then the answer's, or the
        answer's alone; :func:`trace_split` finds where they part. None: texts only.
    tags : (str, str) or None
        Where the trace's tokens end when they hold the closing tag.
    finish_reason : str, optional
        The reply's; default ``gen.finish_reason``, else ``"stop"``.

    Returns
    -------
    Generation
        The answer (``finish_reason`` the reply's) with ``trace`` set (its
        ``finish_reason`` the reply's when the answer is empty, else ``"stop"``). Tokens
        past the answer's text (an end-of-turn token) are left out, as a reader leaves
        them out of any answer.

    Raises
    ------
    ValueError
        ``gen``'s tokens spell neither the reasoning and the answer nor the answer.

    >>> g = with_trace("4", "2+2 is 4")
    >>> g.text, g.trace.text
    ('4', '2+2 is 4')
    """
    if gen is None:
        gen = Generation(text="", finish_reason=finish_reason or "stop")
    elif finish_reason is not None:
        gen = replace(gen, finish_reason=finish_reason)
    if not gen.tokens:
        return _parts(gen, None if _token_data(gen) else 0, answer_text.strip(),
                      reasoning_text.strip())
    n = trace_split(gen.tokens, reasoning_text, answer_text, tags)
    pieces, partial = spelled(gen.tokens[n:])
    end = n + _covering(pieces, len(loose(answer_text, ascii_only=partial)), partial)
    return _parts(gen, n, answer_text.strip(), reasoning_text.strip(), end)


def _token_data(gen: Generation) -> bool:
    """Whether ``gen`` holds per-token data (ids or a statistic of some tokens)."""
    return bool(gen.token_ids) or any(
        column is not None and len(column) for column in
        (*(getattr(gen, name) for name in _COLUMNS), gen.top_tokens))


def _parts(gen: Generation, n: int | None, answer: str, reasoning: str,
           end: int | None = None) -> Generation:
    """The answer (tokens ``n:end``) with its trace (tokens ``:n``); ``n`` None: texts
    only."""
    finish = gen.finish_reason
    trace = _cut(gen, None if n is None else 0, n, reasoning, "stop" if answer else finish)
    out = _cut(gen, n, end, answer, finish)
    out.hidden, out.trace = gen.hidden, trace
    return out


def _cut(gen: Generation, a: int | None, b: int | None, text: str, finish: str) -> Generation:
    """Tokens ``a:b`` of ``gen`` and every per-token column cut alike, with ``text``;
    text only when ``a`` is None (the tokens are unknown)."""
    part = Generation(text=text, finish_reason=finish)
    if a is None:
        return part
    window = slice(a, b)
    part.tokens = list(gen.tokens[window])
    part.token_ids = list(gen.token_ids[window])
    for name in _COLUMNS:
        column = getattr(gen, name)
        setattr(part, name, None if column is None else column[window])
    part.top_tokens = None if gen.top_tokens is None else gen.top_tokens[window]
    members = gen.members
    if members is not None:
        part.members = MemberStatistics(
            logprobs=members.logprobs[:, window],
            entropies=None if members.entropies is None else members.entropies[:, window],
            mean_entropy=None if members.mean_entropy is None else members.mean_entropy[window],
            mean_cross_entropy=(None if members.mean_cross_entropy is None
                                else members.mean_cross_entropy[window]),
            method=members.method)
    return part
