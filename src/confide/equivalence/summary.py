r"""Answers that say how sure they are: a sentence describing the sampled answers' clusters.

From a question's sampled answers, clustered by meaning with the run's judge
(:meth:`Judge.clusters <confide.equivalence.judges.Judge.clusters>`, the one clustering
routine), :func:`summarize` writes a summary such as

    Most likely Paris (about 70%); possibly Lyon (about 20%); other answers about 10%

Each option's share is the fraction of samples in its cluster,

.. math:: \hat p_c = \frac{|\{j : \ell(s_j) = c\}|}{k},

the estimate of the model's answer distribution that semantic entropy uses
(Kuhn et al., 2023). An option is named by its most frequent wording (ties:
the one sampled first); options with a share under ``min_share`` are gathered
into "other answers". Empty answers are one option, "no answer". Shares are
shown rounded to 5% ("under 5%" below 2.5%), the resolution a reader can use;
the exact shares stay in :attr:`UncertaintySummary.options`.

How faithful such a summary is to the sampled distribution is measured by
:func:`confide.evaluation.selfreflect.selfreflect_distance`.

References: [1] Kuhn, Gal & Farquhar, 2023, "Semantic Uncertainty", ICLR.
[2] Kirchhof et al., 2025, "SelfReflect: Can LLMs Communicate Their Internal
Answer Distribution?", arXiv:2505.20295 (summaries of the answer distribution).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from confide.core.records import Item
from confide.equivalence.judges import ExactJudge, Judge
from confide.text import collapse_whitespace

__all__ = ["SummaryOption", "UncertaintySummary", "summarize"]


@dataclass(frozen=True)
class SummaryOption:
    """One cluster of sampled answers: its wording, its share of the samples, its size."""

    answer: str
    share: float
    count: int


@dataclass
class UncertaintySummary:
    """The summary sentence and the distribution it describes (options by share, descending)."""

    text: str
    options: list[SummaryOption] = field(default_factory=list)
    n_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "n_samples": self.n_samples,
                "options": [asdict(o) for o in self.options]}


def _about(share: float) -> str:
    """Share as a reader-sized percentage.

    >>> _about(0.7), _about(0.666), _about(0.02), _about(1.0)
    ('about 70%', 'about 65%', 'under 5%', 'about 100%')
    """
    if share < 0.025:
        return "under 5%"
    return f"about {5 * round(share * 20)}%"


def _shown(option: SummaryOption) -> str:
    return option.answer if option.answer else "no answer"


def summarize(samples: Sequence[str], judge: Judge | None = None, *, item: Item | None = None,
              min_share: float = 0.1) -> UncertaintySummary:
    """Describe the distribution of ``samples`` (the sampled answers alone) in one sentence.

    Parameters
    ----------
    samples : the sampled answers of one question (at least one).
    judge : decides which answers mean the same (default: ``exact``).
    item : the question, for judges that read it.
    min_share : options below this share are gathered into "other answers".

    >>> s = summarize(["Paris"] * 14 + ["Lyon", "lyon"] * 2 + ["Nice", "Rome"])
    >>> s.text
    'Most likely Paris (about 70%); possibly Lyon (about 20%); other answers about 10%'
    >>> summarize(["Paris", "paris."]).text
    'Almost certainly Paris (all 2 samples agree)'
    """
    if not samples:
        raise ValueError("summarize needs at least one sampled answer")
    judge = judge or ExactJudge()
    labels = judge.clusters(list(samples), item).tolist()
    members: dict[Any, list[str]] = {}
    for text, label in zip(samples, labels, strict=True):
        key = "" if not text.strip() else label  # every empty answer is one option
        members.setdefault(key, []).append(collapse_whitespace(text).strip())
    k = len(samples)
    options = []
    for texts in members.values():
        wording = Counter(texts).most_common()  # stable: ties keep first-sampled order
        options.append(SummaryOption(wording[0][0], len(texts) / k, len(texts)))
    options.sort(key=lambda o: -o.share)  # stable: equal shares keep first-sampled order
    return UncertaintySummary(_sentence(options, k, min_share), options, k)


def _sentence(options: list[SummaryOption], k: int, min_share: float) -> str:
    top = options[0]
    if len(options) == 1:
        return f"Almost certainly {_shown(top)} (all {k} samples agree)" if k > 1 else \
            f"Most likely {_shown(top)} (one sample)"
    parts = [f"Most likely {_shown(top)} ({_about(top.share)})"]
    shown = [o for o in options[1:] if o.share >= min_share]
    parts += [f"possibly {_shown(o)} ({_about(o.share)})" for o in shown]
    rest = sum(o.share for o in options[1:] if o.share < min_share)
    if rest > 0:
        parts.append(f"other answers {_about(rest)}")
    return "; ".join(parts)
