r"""What every log reader shares: the :class:`Imported` record, the streamed JSON reading,
the checks on log-probabilities and the one rule that turns per-token steps into a
:class:`~confide.core.records.Generation`.

Reading
-------
A log file is read record by record, never whole (:func:`iter_json_records`):

- a file whose first non-blank character is ``[`` holds **one JSON array**; its
  elements are decoded one at a time from a buffer of at most one element plus
  64 KiB, so a 100,000-element array is streamed like JSON Lines. A record's
  ``line`` is the physical line where its element starts. JSON that does not
  parse inside an array cannot be stepped over, so it raises even when skipping;
- a file whose first non-blank line is a lone ``{`` holds **pretty-printed JSON
  objects**, one after another (one reply saved with ``indent=2``, or ``jq``
  output); they are streamed the same way;
- anything else is **JSON Lines**: one object per line, blank lines ignored; a
  line that is not JSON is a bad record (skippable).

The bytes come through :func:`confide.ingest.sources.open_log`: gzip, bzip2 and xz
files are decompressed as they are read.

Statistics
----------
Every format hands :func:`build_generation` a list of :class:`Step`: the chosen
token, its log-probability and the listed alternatives (``openai`` reads choices
with the ``openai`` backend's own reader and adds the bounds as that backend does,
:func:`confide.backends.topk.topk_entropies`). From it:

- ``token_logprobs`` when every answer token has its log-probability;
- ``top_logprobs`` / ``top_tokens`` when every answer token has at least one
  alternative (``k`` = the fewest any token has, best first);
- ``token_entropies`` only as **lower bounds from the top-k**, by the one rule of
  every path, the ``openai`` and ``vllm`` backends' too (:mod:`confide.backends.topk`): with
  :math:`p_i` the listed probabilities, :math:`p_{(k)}` the smallest of the top-k
  and :math:`R = 1 - \sum_i p_i` the unseen mass,
  :math:`H \ge -\sum_i p_i \log p_i + R \log(1/p_{(k)})` (no vocabulary size is
  needed for the lower bound). Such a record says so in
  :attr:`Imported.approximate`, as the ``openai`` and ``vllm`` backends say so in
  their stored configuration. The bound holds only when the listed alternatives are the
  model's own top-k, which is what OpenAI-compatible servers, vLLM and
  llama.cpp's ``top_logprobs`` give; probabilities taken after a sampler
  (llama.cpp's ``post_sampling_probs``) give no bounds. A log may list the
  sampled token beyond the top-k (the legacy Completions API adds it, with no
  rank to tell): when it is the least likely listed entry it is set apart
  before the bound is taken (:meth:`Step.ranked`); setting apart a true k-th
  token only loosens the bound;
- never ``token_kl_uniform``, ``token_renyi_uniform`` or
  ``token_fisher_rao_uniform``: they need the whole next-token distribution (no
  backend that reads a top-k gives them either, so an answer holds the same
  statistics generated, imported or served).

Logs list tokens past the answer text (an end-of-turn token, a cut stop string);
where a format says so, the answer keeps the shortest prefix of tokens whose text
covers the answer (:func:`answer_length`), as the backends do. An empty list of
tokens with a non-empty answer means the log has no statistics for it, not that
the record is bad.

Untrusted input
---------------
Nothing is evaluated or unpickled. A record is bad, and the error names
``file:line: field:``, when

- a text holds a lone surrogate (``"\udcff"``: valid JSON, not Unicode; half of a
  character a producer cut in two): no such text goes past this reader, to a scorer or
  a store (:func:`decode_line`);
- a log-probability is not a finite number :math:`\le 0` (or a probability lies
  outside :math:`[0, 1]`);
- the statistics of one token contradict each other (:func:`check_step`): the listed
  alternatives' probabilities (with the chosen token's, when it is not listed) sum
  above :math:`1 +` :data:`MASS_TOLERANCE`, or the chosen token's log-probability
  differs from its own entry among the alternatives by more than
  :data:`LOGPROB_TOLERANCE`;
- the tokens do not spell the answer (:func:`check_spelling`): the answer, white space
  aside, must begin the tokens' text (tokens past it are allowed, as above);
- choice indices are not ``0 .. n-1``, each once (:func:`index_order`).
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from confide.backends.openai_logprobs import answer_length
from confide.backends.topk import entropy_lower_bounds, set_apart
from confide.core.errors import InvalidInputError
from confide.core.needs import Need
from confide.core.reasoning import DEFAULT_TAGS, Tags, split_reasoning, with_trace
from confide.core.records import Generation, Item, Record
from confide.core.registry import Registry
from confide.core.spans import loose, spelled
from confide.core.unicode import lone_surrogate, lone_surrogate_message, may_escape_surrogate
from confide.ingest.sources import open_log

__all__ = ["BadField", "CHUNK", "Context", "FORMATS", "Fit", "Imported", "LOGPROB_TOLERANCE",
           "LogFormat", "MASS_TOLERANCE", "Step", "answer_length", "answer_with_trace",
           "build_generation",
           "capabilities_of", "check_logprob", "check_prob", "check_spelling", "check_step",
           "decode_line", "entropy_bounds", "file_layout", "get_list", "get_str",
           "index_order", "is_blank", "item_id", "iter_json_records", "label_from",
           "need_list", "reasoning_field", "references_from", "text_prompt"]

#: Bytes read at a time when streaming a JSON array or pretty-printed objects.
CHUNK = 1 << 16
#: How far above 1 the listed probabilities of one token may sum: logs round their
#: log-probabilities (float32, or a few printed digits).
MASS_TOLERANCE = 1e-3
#: How far (in nats) a chosen token's log-probability may lie from its own entry among
#: the listed alternatives.
LOGPROB_TOLERANCE = 1e-3
# Statistics an imported record can provide, in the order they are checked.
_TOKEN_STATS = (Need.TOKEN_LOGPROBS, Need.TOP_LOGPROBS, Need.TOKEN_ENTROPIES)


class BadField(Exception):
    """Raised by a format's parser: ``field`` of the record is unusable, and why.

    The reader turns it into :class:`~confide.core.errors.InvalidInputError` naming the
    file and line (or skips the record with ``on_bad_record="skip"``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass
class Imported:
    """One record read from a log: the question, the answer, the samples, what they give.

    ``capabilities`` are the :class:`~confide.scorers.Need` values this record's
    statistics provide: ``token_logprobs``, ``top_logprobs`` and ``token_entropies``
    when the greedy answer *and every sample* have them, and ``samples`` when there
    are samples. ``approximate`` maps a statistic that is a bound or not the model's
    own distribution to how (``{"token_entropies": "lower bounds from the top 5
    log-probabilities"}``). ``line`` is where the record starts in the file.
    """

    item: Item
    greedy: Generation
    samples: list[Generation] = field(default_factory=list)
    label: float | None = None
    line: int = 0
    capabilities: frozenset[str] = frozenset()
    approximate: dict[str, str] = field(default_factory=dict)

    def to_record(self) -> Record:
        """A :class:`~confide.core.records.Record` (no scores, no grades yet)."""
        return Record(item=self.item, greedy=self.greedy, samples=list(self.samples))


@dataclass(frozen=True)
class Context:
    """What a parser needs besides the record: where it is, and the reader's options."""

    source: str
    stem: str
    line: int
    label_field: str | None = None
    entropy_bounds: bool = True
    reasoning_tags: Tags | None = DEFAULT_TAGS

    @property
    def default_id(self) -> str:
        return f"{self.stem}-{self.line}"


@dataclass(frozen=True)
class Fit:
    """A record has a format's required fields: ``why`` says which, in words; ``nested``:
    they sit in a field of the record (a logging proxy's ``response``), not at its top,
    so a format whose fields are the record's own is preferred."""

    why: str
    nested: bool = False


@dataclass(frozen=True)
class LogFormat:
    """One log format: its name, whether a record has its required fields (``fits``, for
    ``format="auto"``), how to parse one; ``parse_many``, where a format has it, parses
    many records at once as ``parse`` parses each (each record's :class:`Imported` or the
    exception its parsing raised)."""

    name: str
    fits: Callable[[dict[str, Any]], Fit | None]
    parse: Callable[[dict[str, Any], Context], Imported]
    summary: str
    parse_many: Callable[[Sequence[tuple[dict[str, Any], Context]]],
                         list[Imported | Exception]] | None = None


FORMATS: Registry[LogFormat] = Registry("log format")


@dataclass
class Step:
    """One generated token as a log gives it.

    ``logprob`` is the chosen token's log-probability (None when the log lacks it);
    ``top`` the listed alternatives ``(token, log p)``, best first, or None. With
    ``extra_possible`` the list may hold the chosen token *beyond* the top-k (an
    API that always adds the sampled token and gives no ranks): when the chosen
    token is the least likely entry of two or more it is set apart, so that ``top``
    is surely a top-k.
    """

    token: str
    logprob: float | None
    top: list[tuple[str, float]] | None = None
    token_id: int | None = None
    extra_possible: bool = False

    def ranked(self) -> tuple[list[tuple[str, float]], list[float]]:
        """``(top-k, other known log-probabilities)`` of this step
        (:func:`~confide.backends.topk.set_apart`)."""
        return set_apart(self.token, self.logprob, self.top or [],
                         extra_possible=self.extra_possible)


# --- checks ------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_logprob(value: Any, where: str) -> float:
    """A log-probability: a finite number :math:`\\le 0`, else :class:`BadField`."""
    if not _is_number(value):
        raise BadField(where, f"log-probability must be a number, not {_kind(value)}")
    value = float(value)
    if not math.isfinite(value) or value > 0.0:
        raise BadField(where, f"log-probability must be a finite number <= 0, not {value!r}")
    return value


def check_prob(value: Any, where: str) -> float:
    """A probability in :math:`[0, 1]`, else :class:`BadField`."""
    if not _is_number(value):
        raise BadField(where, f"probability must be a number, not {_kind(value)}")
    value = float(value)
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise BadField(where, f"probability must be in [0, 1], not {value!r}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_step(token: str | None, logprob: float | None, top: Sequence[tuple[str, float]],
               where: str, top_where: str) -> None:
    """One token's statistics agree with each other, else :class:`BadField`.

    ``token`` and ``logprob`` are the chosen token (None: unknown) and ``top`` the listed
    alternatives ``(token, log p)``. The chosen token's log-probability must match one of
    its entries among the alternatives (a token's text may be listed twice, for two token
    ids) within :data:`LOGPROB_TOLERANCE` (field ``where``), and the probabilities of the
    alternatives, with the chosen token's when it is not listed, may sum to at most
    :math:`1 +` :data:`MASS_TOLERANCE` (field ``top_where``).
    """
    own = [v for t, v in top if t == token] if token is not None else []
    if own and logprob is not None and not any(abs(v - logprob) <= LOGPROB_TOLERANCE
                                               for v in own):
        raise BadField(where, f"the chosen token {_shown(token or '')} has log-probability "
                              f"{logprob:.4g}, but {own[0]:.4g} among its alternatives")
    mass = sum(math.exp(v) for _, v in top)
    if token is not None and not own and logprob is not None:
        mass += math.exp(logprob)
    check_mass(mass, top_where)


def check_mass(mass: float, where: str) -> None:
    """The summed probabilities of distinct tokens of one step are at most
    :math:`1 +` :data:`MASS_TOLERANCE`, else :class:`BadField`."""
    if mass > 1.0 + MASS_TOLERANCE:
        raise BadField(where, f"the listed probabilities sum to {mass:.4g}, more than 1: not "
                              "one token's distribution")


_TOKEN_IDS = re.compile(r"(token_id:\d+)+")  # vLLM's --return-tokens-as-token-ids


def check_spelling(tokens: Sequence[str], text: str, where: str) -> None:
    """The tokens spell the answer, else :class:`BadField` (field ``where``).

    White space aside, the answer must begin the tokens' text: tokens past it (an
    end-of-turn token, a stop string the server cut) are allowed. Tokens that are a
    character's partial bytes (OpenAI's ``bytes:\\xe2``, or U+FFFD as llama.cpp and
    vLLM write them) match any character, so where one is present only the ASCII
    characters are compared; tokens written as ids (``token_id:123``) are not text and
    are not compared. Byte-level BPE and SentencePiece marks of white space (``Ġ``,
    ``Ċ``, ``▁``) count as white space.
    """
    joined = "".join(tokens)
    if "".join(joined.split()).startswith("".join(text.split())):
        return  # the common case, first and cheap
    if _TOKEN_IDS.fullmatch(joined):
        return
    pieces, partial = spelled(tokens)
    a, b = loose(text, ascii_only=partial), loose("".join(pieces), ascii_only=partial)
    if not b.startswith(a):
        raise BadField(where, f"the tokens spell {_shown(joined)} but the answer is "
                              f"{_shown(text)}")


def _shown(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")


def index_order(indices: Sequence[Any], where: Callable[[int], str]) -> list[int]:
    """Positions of a record's choices (or outputs) in ``index`` order.

    ``indices[i]`` is the ``index`` of the i-th listed choice (None: not given, its
    position is taken). They must be the integers ``0 .. n-1``, each once: a negative,
    too large or repeated index would make a sample the graded answer.
    :class:`BadField` names ``where(i)`` otherwise.
    """
    n = len(indices)
    taken: dict[int, int] = {}
    for i, index in enumerate(indices):
        index = i if index is None else index
        if isinstance(index, bool) or not isinstance(index, int):
            raise BadField(where(i), f"must be an integer, not {_kind(index)}")
        if not 0 <= index < n:
            raise BadField(where(i), f"must be from 0 to {n - 1} (one per choice), not "
                                     f"{index}")
        if index in taken:
            raise BadField(where(i), f"index {index} is given twice (also at position "
                                     f"{taken[index]})")
        taken[index] = i
    return [taken[index] for index in range(n)]


def item_id(sources: Sequence[tuple[dict[str, Any], str, str]], default: str) -> str:
    """The first id found among ``(object, key, field named in errors)``, as text;
    ``default`` (the file's stem and line) when none is there."""
    for source, key, where in sources:
        value = source.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise BadField(where, "an id must be text or an integer")
        return str(value)
    return default


def get_str(obj: dict[str, Any], key: str, where: str, *, default: str | None = None,
            allow_none: bool = False) -> str | None:
    """``obj[key]`` as text; missing gives ``default``; null gives ``default`` when allowed."""
    if key not in obj:
        return default
    value = obj[key]
    if value is None and allow_none:
        return default
    if not isinstance(value, str):
        raise BadField(where, f"must be text, not {_kind(value)}")
    return value


def get_list(obj: dict[str, Any], key: str, where: str) -> list[Any] | None:
    """``obj[key]`` as a list; missing (or null) gives None."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise BadField(where, f"must be a list, not {_kind(value)}")
    return value


def need_list(obj: dict[str, Any], key: str, where: str) -> list[Any]:
    """``obj[key]``, which must be a list."""
    value = get_list(obj, key, where)
    if value is None:
        raise BadField(where, "missing" if key not in obj else "must be a list, not null")
    return value


def text_prompt(value: Any, where: str) -> str | list[dict[str, str]]:
    """A prompt: text, or chat messages (each with text ``role`` and ``content``).

    Message content given as a list of parts keeps its text parts, joined.
    """
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise BadField(where, f"must be text or a list of chat messages, not {_kind(value)}")
    messages = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadField(f"{where}[{i}]", "a chat message needs a text 'role'")
        content = m.get("content")
        if content is None:
            content = ""
        elif isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(p["text"] for p in content
                              if isinstance(p, dict) and isinstance(p.get("text"), str))
        elif not isinstance(content, str):
            raise BadField(f"{where}[{i}].content", f"must be text, not {_kind(content)}")
        messages.append({"role": m["role"], "content": content})
    return messages


def references_from(value: Any, where: str) -> list[str]:
    """Accepted answers: text, a number, or a list of them (empty texts dropped)."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    out: list[str] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            if v.strip():
                out.append(v.strip())
        elif _is_number(v) and math.isfinite(float(v)):
            out.append(str(int(v)) if float(v).is_integer() else repr(float(v)))
        else:
            raise BadField(where if not isinstance(value, list) else f"{where}[{i}]",
                           f"a reference must be text or a number, not {_kind(v)}")
    return list(dict.fromkeys(out))


def label_from(obj: dict[str, Any], ctx: Context, defaults: Iterable[str] = ()
               ) -> float | None:
    """The record's correctness label in [0, 1] (true/false or a number).

    ``ctx.label_field`` (the user's choice) must be present; a dotted name
    (``grades.human``, as ``confide export --format openai`` writes grades) reads a
    field of an object. Otherwise the first of ``defaults`` present is read, and none
    gives None.
    """
    key: str | None
    if ctx.label_field is not None:
        key = ctx.label_field
        if key not in obj and "." in key:
            head, _, rest = key.partition(".")
            inner = obj.get(head)
            if isinstance(inner, dict) and rest in inner:
                obj, key = inner, rest
        if key not in obj:
            raise BadField(ctx.label_field, "missing label field")
    else:
        key = next((k for k in defaults if k in obj), None)
    if key is None or obj[key] is None:
        return None
    value = obj[key]
    if isinstance(value, bool):
        return float(value)
    if not _is_number(value) or not 0.0 <= float(value) <= 1.0:
        raise BadField(ctx.label_field or key,
                       f"a label must be true/false or a number in [0, 1], not {value!r}")
    return float(value)


# --- from steps to a Generation ------------------------------------------------------------


def reasoning_field(obj: Any, keys: Sequence[str], where: str) -> str | None:
    """The reply's reasoning text: the first of ``keys`` (``reasoning_content``,
    ``reasoning``, ``thinking``) that ``obj`` holds and is not null; None for none.
    :class:`BadField` (``where`` + key) for one that is not text."""
    if not isinstance(obj, dict):
        return None
    for key in keys:
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise BadField(f"{where}{key}", f"reasoning must be text, not {_kind(value)}")
        return value
    return None


def answer_with_trace(gen: Generation, reasoning: str | None, ctx: Context, where: str
                      ) -> Generation:
    """``gen`` as its final answer with the reasoning trace split off
    (:mod:`confide.core.reasoning`): by the source's reasoning field when it has one
    (``gen``'s tokens then cover the trace and the answer, or the answer alone; build
    ``gen`` uncut), else by the tags ``ctx.reasoning_tags`` in its text (None: not split).
    :class:`BadField` (field ``where``, the tokens) when the tokens spell neither."""
    if reasoning is not None:
        try:
            return with_trace(gen.text, reasoning, gen, tags=ctx.reasoning_tags)
        except ValueError as exc:
            raise BadField(where, f"{exc} (the reasoning field and the answer's tokens "
                                  "disagree)") from None
    if ctx.reasoning_tags is None:
        return gen
    return split_reasoning(gen, ctx.reasoning_tags)



def build_generation(text: str, steps: list[Step] | None, *, finish_reason: str = "stop",
                     cut: bool = True, bounds: bool = True, token_ids: list[int] | None = None,
                     tokens_known: bool = True) -> tuple[Generation, dict[str, str]]:
    """A :class:`~confide.core.records.Generation` from an answer and its steps, and its notes.

    ``steps`` None: the log has no statistics for this answer (text only). With
    ``cut``, the steps are cut to the answer text (:func:`answer_length`; needs
    the tokens' text, ``tokens_known``). ``top_logprobs`` holds the listed
    alternatives, best first, cut to the fewest any token has. ``bounds``: also
    give the entropies' lower bounds (:func:`entropy_bounds`). Returns the
    generation and the ``approximate`` notes of its statistics.
    """
    gen = Generation(text=text.strip(), finish_reason=finish_reason)
    if steps is None or (not steps and text.strip()):
        if token_ids:
            gen.token_ids = list(token_ids)
        return gen, {}
    n = answer_length([s.token for s in steps], text) if cut and tokens_known else len(steps)
    steps = steps[:n]
    if tokens_known:
        gen.tokens = [s.token for s in steps]
    ids = [s.token_id for s in steps]
    if ids and all(i is not None for i in ids):
        gen.token_ids = [int(i) for i in ids]  # type: ignore[arg-type]
    if all(s.logprob is not None for s in steps):
        gen.token_logprobs = np.asarray([s.logprob for s in steps], dtype=np.float32)
    k = min((len(s.top or []) for s in steps), default=0)
    if k or not steps:
        gen.top_logprobs = np.asarray([[v for _, v in (s.top or [])[:k]] for s in steps],
                                      dtype=np.float32).reshape(len(steps), k)
        gen.top_tokens = [[t for t, _ in (s.top or [])[:k]] for s in steps]
    notes: dict[str, str] = {}
    if bounds:
        gen.token_entropies, notes = entropy_bounds(steps)
    return gen, notes


def entropy_bounds(steps: list[Step]) -> tuple[np.ndarray | None, dict[str, str]]:
    """Per-token lower bounds of the entropy from each step's top-k, and their note.

    Each step's alternatives are taken as its top-k after :meth:`Step.ranked` set
    apart a sampled token listed beyond them; the bound is the one every path uses
    (:func:`confide.backends.topk.entropy_lower_bounds`, see the module's notes). None
    when some step has no alternative of non-zero probability; an empty array for no
    steps.
    """
    ranked = (step.ranked() for step in steps)
    return entropy_lower_bounds(([v for _, v in top], known) for top, known in ranked)


def capabilities_of(greedy: Generation, samples: list[Generation]) -> frozenset[str]:
    """The token statistics the greedy answer and every sample have, and ``samples``."""
    gens = [greedy, *samples]
    caps = {stat for stat in _TOKEN_STATS if all(getattr(g, stat) is not None for g in gens)}
    if samples:
        caps.add(Need.SAMPLES)
    return frozenset(caps)


# --- streamed JSON -------------------------------------------------------------------------


def _layout(fh: IO[bytes]) -> str:
    """``"array"``, ``"values"`` (pretty-printed objects) or ``"lines"``; rewinds ``fh``."""
    head = fh.read(CHUNK).removeprefix(codecs.BOM_UTF8)
    fh.seek(0)
    stripped = head.lstrip()
    if stripped.startswith(b"["):
        return "array"
    first = stripped.split(b"\n", 1)[0].strip()
    return "values" if first == b"{" else "lines"


def iter_json_records(path: Path, source: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, value)`` for each record of a log file, streamed (see module notes).

    ``source`` is how messages name the file. A value that is not JSON, or not Unicode,
    is yielded as :class:`BadField` in JSON Lines, so the caller may skip it (and so is
    one with a lone surrogate in any layout); JSON that does not parse in an array or
    pretty-printed objects raises :class:`~confide.core.errors.InvalidInputError`, as
    does a file that cannot be read or is not UTF-8 there.
    """
    with open_log(path, source) as fh:
        layout = _layout(fh)
        if layout == "lines":
            yield from _iter_lines(fh, source)
        else:
            yield from _iter_values(fh, source, array=layout == "array")


def file_layout(path: Path, source: str) -> str:
    """``"lines"`` (JSON Lines), ``"array"`` (one JSON array) or ``"values"``
    (pretty-printed objects): how :func:`iter_json_records` reads ``path``."""
    with open_log(path, source) as fh:
        return _layout(fh)


_BLANK = object()


#: The fast reader of a line (``benchmarks/results/import_speed.md`` measures it against
#: :func:`json.loads` and ``orjson``). What it refuses, Python's :mod:`json` reads after it.
_FAST_DECODER = msgspec.json.Decoder()


def decode_line(raw: bytes, n: int) -> Any:
    """The JSON value of line ``n`` of a JSON Lines file: the value, a :class:`BadField`
    (not UTF-8, not JSON, not Unicode), or :data:`_BLANK` for a blank line. One line is
    read alike wherever it is read (:func:`iter_json_records`, or a worker process of an
    import).

    ``msgspec`` reads the line first: where it gives a value, :func:`json.loads` gives the
    same one (the same ints of any size, floats to the bit, ``-0.0``, the last of
    repeated keys; ``tests/test_import_speed_paths.py``). Anything it refuses (a blank
    line, bytes that are not UTF-8, malformed JSON, ``NaN`` and ``Infinity``, numbers
    beyond the float range, any lone surrogate, nesting past its depth) is read again by
    :func:`json.loads`, so the value or the error is the one it always was.
    """
    if n == 1:
        raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return _FAST_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadField("encoding", f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                                    f"column {exc.start + 1}); save the file as UTF-8")
    if not line.strip():
        return _BLANK
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return BadField("record", f"malformed JSON ({exc.msg} at column {exc.colno})"
                        + _cut_short(exc, line, last=not raw.endswith(b"\n")))
    except RecursionError:
        return BadField("record", _TOO_DEEP)
    return _unicode_checked(value) if may_escape_surrogate(line) else value


_TOO_DEEP = ("JSON nested too deeply to read (more levels of [ and { than Python's JSON "
             "reader allows, about 1,000)")


def _cut_short(exc: json.JSONDecodeError, text: str, *, last: bool) -> str:
    """What to add to a JSON error that is the end of the text: it was cut short."""
    if not (exc.msg.startswith("Unterminated string") or exc.pos >= len(text.rstrip())):
        return ""
    return (": cut short, the file ends inside this record (still being written, or "
            "truncated?)" if last else ": cut short, the line ends inside a JSON value")


def _unicode_checked(value: Any) -> Any:
    """``value``, or the :class:`BadField` of its first text holding a lone surrogate."""
    found = lone_surrogate(value)
    if found is None:
        return value
    where, char = found
    return BadField(where, f"{lone_surrogate_message(char)}; fix the log, or skip such "
                           "records (on_bad_record='skip', --on-bad-record skip)")


def is_blank(value: Any) -> bool:
    """Whether :func:`decode_line` found a blank line."""
    return value is _BLANK


def _iter_lines(fh: IO[bytes], source: str) -> Iterator[tuple[int, Any]]:
    for n, raw in enumerate(fh, start=1):
        value = decode_line(raw, n)
        if value is not _BLANK:
            yield n, value


class _Buffer:
    """Decoded text of a file read in chunks, with the line number of its read point."""

    def __init__(self, fh: IO[bytes], source: str) -> None:
        self.fh, self.source = fh, source
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.line = 1
        self.eof = False
        self.first = True

    def more(self, at_least: int = CHUNK) -> bool:
        """Read more text; False at the end of the file."""
        if self.eof:
            return False
        if self.pos > CHUNK:  # drop what was consumed: memory stays one element + a chunk
            self.text = self.text[self.pos:]
            self.pos = 0
        raw = self.fh.read(max(CHUNK, at_least))
        if self.first:
            raw, self.first = raw.removeprefix(codecs.BOM_UTF8), False
        try:
            self.text += self.decoder.decode(raw, final=not raw)
        except UnicodeDecodeError as exc:
            line = self.line + self.text.count("\n", self.pos)
            raise InvalidInputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the "
                                    "file as UTF-8", file=self.source, line=line,
                                    field="encoding") from None
        if not raw:
            self.eof = True
        return bool(raw) or not self.eof

    def advance(self, to: int) -> None:
        self.line += self.text.count("\n", self.pos, to)
        self.pos = to

    def skip_space(self) -> str:
        """Skip white space; the next character, or "" at the end."""
        while True:
            i = self.pos
            while i < len(self.text) and self.text[i] in " \t\r\n":
                i += 1
            self.advance(i)
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def error(self, message: str) -> InvalidInputError:
        return InvalidInputError(message, file=self.source, line=self.line, field="record")


def _iter_values(fh: IO[bytes], source: str, *, array: bool) -> Iterator[tuple[int, Any]]:
    buf = _Buffer(fh, source)
    decoder = json.JSONDecoder()
    if array:
        buf.skip_space()
        buf.advance(buf.pos + 1)  # the "[" _layout saw
    first = True
    while True:
        c = buf.skip_space()
        if array:
            if c == "]":
                buf.advance(buf.pos + 1)
                if buf.skip_space():
                    raise buf.error("text after the closing ']' of the array")
                return
            if not first:
                if c != ",":
                    raise buf.error("malformed JSON array (expected ',' or ']')" if c
                                    else "the JSON array is not closed (missing ']')")
                buf.advance(buf.pos + 1)
                c = buf.skip_space()
            if not c:
                raise buf.error("the JSON array is not closed (missing ']')")
        elif not c:
            return
        first = False
        while True:
            try:
                value, end = decoder.raw_decode(buf.text, buf.pos)
            except json.JSONDecodeError as exc:
                # Cut by the end of the buffer (an open string, or a failure in its last
                # characters: a number, literal or escape): read on. Anything else is
                # malformed now, so a damaged file is never read to its end first.
                cut = exc.msg.startswith("Unterminated string") or exc.pos >= len(buf.text) - 16
                if cut and buf.more(len(buf.text) - buf.pos):
                    continue
                ends = ": cut short, the file ends inside this record (still being written, " \
                    "or truncated?)" if cut and buf.eof else ""
                raise buf.error(f"malformed JSON ({exc.msg}){ends}") from None
            except RecursionError:
                raise buf.error(_TOO_DEEP) from None
            if end == len(buf.text) and buf.more():  # a number or literal may go on
                continue
            break
        line = buf.line
        escaped = may_escape_surrogate(buf.text, buf.pos, end)
        buf.advance(end)
        yield line, _unicode_checked(value) if escaped else value
