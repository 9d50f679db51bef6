r"""SelfReflect: how faithfully a summary describes a model's distribution of answers.

Kirchhof et al. (2025) measure a summary string :math:`s` of a question's answer
distribution by asking a judge model to fill in masked words of answers drawn
from that distribution, once with the summary as its context and once with a
set of sampled answers as its context. A faithful summary lets the judge
predict the masked words the way the sampled answers do. The answers are split
in two: *conditioning* answers :math:`A` (the context standing for the
distribution) and *test* answers :math:`T` (the ones masked). For each test
answer :math:`t \in T` and each of its words :math:`w` (stopwords skipped unless
the answer has nothing else), the task :math:`(t, w)` is "fill in the missing
word of :math:`t` with :math:`w` replaced by ``_``", asked after

* the summary: "Question: q", "Answer: :math:`s`", then the task; or
* the distribution: "Question: q", then the answers :math:`a_1 \dots a_N` listed,
  then the task.

With :math:`p_s` and :math:`p_A` the judge's next-token distributions in the
two contexts, softened by a post-hoc temperature :math:`\tau`, the distance is
the mean total variation (the 1-Wasserstein distance under the 0-1 metric)
over all tasks :math:`\mathcal{M}`,

.. math::

    \operatorname{SR}(s) = \frac{1}{|\mathcal{M}|} \sum_{(t, w) \in \mathcal{M}}
        \tfrac12 \sum_{v} \big| p_s^{\tau}(v \mid t_{-w}) - p_A^{\tau}(v \mid t_{-w}) \big|,
    \qquad p^{\tau}(v) \propto p(v)^{1/\tau}.

Lower is better (0: the summary is as informative as the samples themselves);
the paper calls it the SelfReflect score, confide names it
:func:`selfreflect_distance` because confide's ``*_score`` names are higher-better.

How confide's value relates to the paper's code (``apple/ml-selfreflect``,
``calculate_score.py``):

* the judge is any confide backend: the distributions are its top-``top_k``
  next-token alternatives (one generated token each), each renormalised over
  its own listed tokens after softening, where the paper reads the full
  vocabulary from vLLM; the temperature is the paper's :math:`\tau = 5`. With
  ``top_k`` covering the vocabulary the two agree; a truncated top-k leaves out
  the tail, which at :math:`\tau = 5` both contexts share almost evenly. That
  changes the **scale**, so confide's values are not comparable with the
  paper's numbers, only with each other (same judge, same ``top_k``): over
  SmolLM2's 49,152 tokens softening at :math:`\tau = 5` spreads most of the
  mass over the tail, where both contexts agree. Worked case: a Zipf
  distribution (:math:`p_r \propto r^{-1.1}`) against the same with its two
  most likely tokens swapped gives a total variation of 2.4e-5 over the full
  vocabulary and 5.3e-3 over the renormalised top 50, about 220 times more
  (at :math:`\tau = 1`: 0.074 and 0.139);

  >>> import numpy as np
  >>> p = 1 / np.arange(1, 49153) ** 1.1; p /= p.sum()
  >>> q = p.copy(); q[[0, 1]] = p[[1, 0]]
  >>> soft = lambda x: x ** 0.2 / (x ** 0.2).sum()
  >>> tv = lambda a, b: 0.5 * np.abs(a - b).sum()
  >>> f"{tv(soft(p), soft(q)):.1e}", f"{tv(soft(p[:50]), soft(q[:50])):.1e}"
  ('2.4e-05', '5.3e-03')

* a masked word is scored on its first token (the paper scores each of its
  tokens, the later ones given the earlier): the first token carries the
  choice between candidate answers, later ones mostly complete the spelling;
* the prompts are confide's own wording of the same tasks, as plain text that
  ends where the left-out word begins ("... The left-out word:"), so base and
  chat models alike answer with the word (the paper wraps its prompts in the
  chat template; SmolLM2-135M-Instruct then starts every reply with "The",
  whatever the context); a stopword is one of scikit-learn's English stop words
  (the paper uses its own TF-IDF vocabulary's);
* tasks with the same masked text are asked once and counted as often as
  they occur (the same value, less work);
* a task whose reply ends at once (the judge's first token ends its turn, so no
  alternatives are listed) is left out for every summary alike, and counted.

Validation (``tests/test_selfreflect.py``, SmolLM2-135M-Instruct as the
judge): on constructed answer sets where the right order is known, the
cluster listing of the answers is closer than a wrong answer. At
:math:`\tau = 1` and ``top_k=20`` it was not (on "capital of France", 6 Paris
and 4 Lyon: listing 0.447, wrong 0.370), which is why the paper's temperature
is kept.

References: [1] Kirchhof, Füger, Goliński, Dhekane, Blaas, Oh & Williamson,
2025, "SelfReflect: Can LLMs Communicate Their Internal Answer Distribution?",
arXiv:2505.20295.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from confide.backends.base import Backend, GenerationSpec, Prompt
from confide.core.errors import InvalidInputError

__all__ = ["SelfReflectResult", "masked_tasks", "selfreflect_distance", "total_variation"]

_TASK = ("\n\nAnother answer to the question, with one word left out: {masked}\nThe left-out word:")


@dataclass
class SelfReflectResult:
    """Distances of each summary (lower = more faithful) and what they were computed on."""

    distances: dict[str, float]
    n_tasks: int
    skipped_tasks: int = 0
    per_task: dict[str, list[float]] = field(default_factory=dict, repr=False)


def _is_stopword(word: str) -> bool:
    # scikit-learn's list, imported here: at module level it costs `import confide` 0.3 s
    # (and pulls in pandas and pyarrow) for a function few calls reach.
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return word.strip(".,;:!?'\"()").lower() in ENGLISH_STOP_WORDS


def masked_tasks(answer: str) -> list[str]:
    """The answer with each of its words in turn replaced by ``_``; stopwords are kept
    unless the answer is made of stopwords only.

    >>> masked_tasks("The capital is Paris")
    ['The _ is Paris', 'The capital is _']
    >>> masked_tasks("Paris"), masked_tasks("it is")
    (['_'], ['_ is', 'it _'])
    """
    words = answer.split()
    content = any(not _is_stopword(w) for w in words)
    tasks = []
    for i, word in enumerate(words):
        if content and _is_stopword(word):
            continue
        tasks.append(" ".join([*words[:i], "_", *words[i + 1:]]))
    return tasks


def _softened(top: Sequence[tuple[str, float]], temperature: float) -> dict[str, float]:
    """:math:`p^{\\tau}` over the listed tokens (equal token texts merged)."""
    merged: dict[str, float] = {}
    for token, logprob in top:
        merged[token] = float(np.logaddexp(merged[token], logprob)) if token in merged \
            else float(logprob)
    scaled = {t: lp / temperature for t, lp in merged.items()}
    peak = max(scaled.values())
    weights = {t: math.exp(v - peak) for t, v in scaled.items()}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()}


def total_variation(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]], *,
                    temperature: float = 1.0) -> float:
    r"""Total variation between two listed next-token distributions, softened by ``temperature``.

    .. math:: \operatorname{TV}(p, q) = \tfrac12 \sum_v |p^{\tau}(v) - q^{\tau}(v)|,
              \qquad p^{\tau}(v) = \frac{p(v)^{1/\tau}}{\sum_u p(u)^{1/\tau}}

    over the union of the listed tokens (a token not listed has probability 0).
    ``a`` and ``b`` are (token, log-probability) pairs.

    >>> ln = math.log
    >>> round(total_variation([("Paris", ln(.75)), ("Lyon", ln(.25))], [("Paris", ln(.5)),
    ...       ("Lyon", ln(.5))]), 4)
    0.25
    >>> total_variation([("Paris", 0.0)], [("Berlin", 0.0)])
    1.0
    """
    if not a or not b:
        raise InvalidInputError("both distributions need at least one listed token",
                                field="top")
    p, q = _softened(a, temperature), _softened(b, temperature)
    return 0.5 * sum(abs(p.get(v, 0.0) - q.get(v, 0.0)) for v in set(p) | set(q))


def _question(question: str) -> str:
    q = question.strip()
    return q if q.startswith("Question:") else f"Question: {q}"


def selfreflect_distance(judge: Backend, question: str, summaries: Mapping[str, str],
                         conditioning: Sequence[str], test_answers: Sequence[str], *,
                         top_k: int = 50, temperature: float = 5.0, seed: int = 0
                         ) -> SelfReflectResult:
    """The SelfReflect distance of each summary to the answers' distribution (module notes).

    Parameters
    ----------
    judge : any confide backend; it fills in the masked words.
    question : the question the answers answer.
    summaries : name → summary text, each scored against the same tasks.
    conditioning : sampled answers that stand for the distribution in the judge's context.
    test_answers : other sampled answers of the same question, whose words are masked.
    top_k : alternatives read per next-token distribution.
    temperature : post-hoc softening :math:`\\tau` of the judge's distributions.

    Returns
    -------
    SelfReflectResult : ``distances[name]`` in [0, 1], lower = more faithful.
    """
    if not summaries:
        raise InvalidInputError("give at least one summary", field="summaries")
    answers = [" ".join(a.split()) for a in conditioning if a.strip()]
    if not answers:
        raise InvalidInputError("give at least one non-empty conditioning answer",
                                field="conditioning")
    if not temperature > 0:
        raise InvalidInputError(f"must be > 0, got {temperature!r}", field="temperature")
    tasks = [t for answer in test_answers for t in masked_tasks(answer)]
    if not tasks:
        raise InvalidInputError("the test answers have no words to mask", field="test_answers")
    q = _question(question)
    reference = q + "\nAnswers:\n" + "\n".join(f"- {a}" for a in answers)
    names = list(summaries)
    unique = Counter(tasks)  # equal masked texts ask the same: ask once, count each
    prompts: list[Prompt] = []
    for masked in unique:
        prompts.append(reference + _TASK.format(masked=masked))
        prompts += [f"{q}\nAnswer: {' '.join(summaries[name].split())}"
                    + _TASK.format(masked=masked) for name in names]
    spec = GenerationSpec(max_new_tokens=1, top_k_alternatives=top_k)
    results = judge.generate(prompts, spec, [seed] * len(prompts))
    tops: list[list[tuple[str, float]] | None] = []
    for result in results:
        gen = result.greedy
        if gen is None or not gen.top_tokens or gen.top_logprobs is None:
            tops.append(None)  # the judge's reply ended at once: nothing listed
            continue
        tops.append([(t, float(v)) for t, v in zip(gen.top_tokens[0], gen.top_logprobs[0])])
    per_task: dict[str, list[float]] = {name: [] for name in names}
    skipped = 0
    width = 1 + len(names)
    for n, count in enumerate(unique.values()):
        block = tops[n * width:(n + 1) * width]
        if any(top is None for top in block):
            skipped += count
            continue
        for name, top in zip(names, block[1:]):
            per_task[name] += [total_variation(top, block[0],  # type: ignore[arg-type]
                                               temperature=temperature)] * count
    used = len(tasks) - skipped
    distances = {name: (sum(v) / used if used else math.nan) for name, v in per_task.items()}
    return SelfReflectResult(distances, used, skipped, per_task)
