r"""What every equivalence judge shares: decisions, a pair cache, the one clustering routine.

:class:`Judge` is the interface of :mod:`confide.equivalence.judges` (which registers the
judges and re-exports these names): a subclass gives each answer a *key* and,
unless equal keys alone decide, judges batches of distinct key pairs; this
module keeps the machinery around that: unique keys only, each unordered pair
judged once and cached, empty answers matching nothing, and the clusters
(:meth:`Judge.clusters`, Kuhn et al., 2023: the samples alone, each joining
the first cluster whose first member it is equivalent to) with
:meth:`Judge.place` for the greedy answer. The scorers (:mod:`confide.scorers.features`),
voting and the report all cluster through it.

References: [1] Kuhn, Gal & Farquhar, 2023, "Semantic Uncertainty: Linguistic
Invariances for Uncertainty Estimation in Natural Language Generation", ICLR.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from confide.core.records import Item
from confide.text import collapse_whitespace

__all__ = ["Decision", "Judge", "question_of"]


@dataclass(frozen=True)
class Decision:
    """A judge's verdict on one unordered pair of answers.

    ``equivalent``: same meaning (drives the clusters). ``affinity``: symmetric
    similarity in [0, 1] (drives the graph scorers); 1 for equal keys.
    """

    equivalent: bool
    affinity: float


def question_of(item: Item | None) -> str:
    """The item's question, or empty text without an item."""
    return item.question if item is not None else ""


class Judge(ABC):
    """One interface for every equivalence judge.

    Subclasses define :meth:`key` (normalised form; equal keys are always
    equivalent) and either set ``by_key = True`` (distinct keys are never
    equivalent) or implement :meth:`_judge` (a batch of distinct key pairs →
    decisions, symmetric in each pair).
    """

    name: ClassVar[str]
    by_key: ClassVar[bool] = False
    uses_question: ClassVar[bool] = False  # decisions depend on the question (cache by it)
    directions: ClassVar[int] = 1          # judgments made per unordered pair

    def __init__(self) -> None:
        self.calls = 0
        self._cache: dict[tuple[str, str, str], Decision] = {}

    # -- what subclasses provide -------------------------------------------------

    def key(self, text: str, item: Item | None = None) -> str:
        """The normalised form of an answer: whitespace collapsed."""
        return collapse_whitespace(text)

    def _judge(self, pairs: list[tuple[str, str]], item: Item | None) -> list[Decision]:
        raise NotImplementedError  # pragma: no cover - key judges never get here

    def config(self) -> dict[str, Any]:
        """JSON-safe identity of the judge (what determines its decisions)."""
        return {"judge": self.name}

    # -- shared machinery --------------------------------------------------------

    def decide(self, a: str, b: str, item: Item | None = None) -> Decision:
        """The decision for one pair of answers (raw texts); an empty answer matches nothing."""
        if _is_empty(a) or _is_empty(b):
            return Decision(False, 0.0)
        ka, kb = self.key(a, item), self.key(b, item)
        return self._decisions([(ka, kb)], item)[0]

    def _decisions(self, pairs: Sequence[tuple[str, str]], item: Item | None) -> list[Decision]:
        context = question_of(item) if self.uses_question else ""
        out: list[Decision | None] = []
        missing: dict[tuple[str, str], None] = {}
        for ka, kb in pairs:
            if ka == kb:
                out.append(Decision(True, 1.0))
                continue
            if self.by_key:
                out.append(Decision(False, 0.0))
                continue
            lo, hi = _sorted_pair(ka, kb)
            hit = self._cache.get((context, lo, hi))
            out.append(hit)
            if hit is None:
                missing[(lo, hi)] = None
        if missing:
            todo = list(missing)
            decided = self._judge(todo, item)
            if len(decided) != len(todo):
                raise RuntimeError(f"judge {self.name} returned {len(decided)} decisions "
                                   f"for {len(todo)} pairs")  # a bug in the judge, not input
            self.calls += self.directions * len(todo)
            for (lo, hi), decision in zip(todo, decided):
                self._cache[(context, lo, hi)] = decision
            out = [d if d is not None else self._cache[(context,) + _sorted_pair(ka, kb)]
                   for d, (ka, kb) in zip(out, pairs)]
        return out  # type: ignore[return-value]

    def _unique(self, texts: Sequence[str], item: Item | None
                ) -> tuple[list[str | None], np.ndarray]:
        """Unique keys (``None``: an empty answer, one entry each) and each text's index."""
        unique: list[str | None] = []
        index: dict[str, int] = {}
        inverse = np.empty(len(texts), dtype=np.intp)
        for n, text in enumerate(texts):
            if _is_empty(text):
                inverse[n] = len(unique)
                unique.append(None)
                continue
            k = self.key(text, item)
            if k not in index:
                index[k] = len(unique)
                unique.append(k)
            inverse[n] = index[k]
        return unique, inverse

    def _pair_table(self, unique: list[str | None], item: Item | None
                    ) -> tuple[np.ndarray, np.ndarray]:
        u = len(unique)
        equivalent = np.eye(u, dtype=bool)
        affinity = np.eye(u, dtype=np.float64)
        if self.by_key:
            return equivalent, affinity
        pairs = [(i, j) for i in range(u) for j in range(i + 1, u)
                 if unique[i] is not None and unique[j] is not None]
        if not pairs:
            return equivalent, affinity
        decided = self._decisions([(unique[i], unique[j]) for i, j in pairs], item)  # type: ignore[misc]
        for (i, j), d in zip(pairs, decided):
            equivalent[i, j] = equivalent[j, i] = d.equivalent
            affinity[i, j] = affinity[j, i] = d.affinity
        return equivalent, affinity

    def clusters(self, texts: Sequence[str], item: Item | None = None) -> np.ndarray:
        """Cluster label of each answer (0, 1, ... in order of first appearance).

        Each unique answer joins the first cluster whose first member it is
        equivalent to (Kuhn et al., 2023), else opens a new one. Pass the
        samples alone; place the greedy answer with :meth:`place`.

        >>> from confide.equivalence.judges import ExactJudge
        >>> ExactJudge().clusters(["Paris.", "paris", "Lyon", "The Paris"]).tolist()
        [0, 0, 1, 0]
        >>> ExactJudge().clusters(["", "Lyon", " "]).tolist()  # empty answers match nothing
        [0, 1, 2]
        """
        unique, inverse = self._unique(texts, item)
        equivalent, _ = self._pair_table(unique, item)
        representatives: list[int] = []
        label_of = np.empty(len(unique), dtype=np.intp)
        for i in range(len(unique)):
            for c, r in enumerate(representatives):
                if equivalent[i, r]:
                    label_of[i] = c
                    break
            else:
                label_of[i] = len(representatives)
                representatives.append(i)
        return label_of[inverse]

    def place(self, answer: str, texts: Sequence[str], item: Item | None = None,
              labels: np.ndarray | None = None) -> int:
        """The label of ``answer`` among the clusters of ``texts`` (:meth:`clusters`).

        It joins the first cluster whose first member it is equivalent to, the
        rule that built the clusters; if none, it gets the next unused label.
        ``labels``: the clusters of ``texts`` if already computed. The answer
        does not change the clusters of ``texts``.

        >>> from confide.equivalence.judges import ExactJudge
        >>> ExactJudge().place("paris", ["Lyon", "Paris.", "lyon"])
        1
        >>> ExactJudge().place("Nice", ["Lyon", "Paris."])
        2
        """
        if labels is None:
            labels = self.clusters(texts, item)
        labels = np.asarray(labels, dtype=np.intp)
        new = int(labels.max()) + 1 if labels.size else 0
        if _is_empty(answer):
            return new
        first = {int(lab): n for n, lab in reversed(list(enumerate(labels.tolist())))}
        reps = [(lab, texts[n]) for lab, n in sorted(first.items()) if not _is_empty(texts[n])]
        if not reps:
            return new
        key = self.key(answer, item)
        decided = self._decisions([(key, self.key(t, item)) for _, t in reps], item)
        for (lab, _), d in zip(reps, decided):
            if d.equivalent:
                return lab
        return new

    def affinity(self, texts: Sequence[str], item: Item | None = None) -> np.ndarray:
        """Symmetric affinity matrix :math:`W \\in [0, 1]^{n \\times n}`, ones on the diagonal.

        >>> from confide.equivalence.judges import ExactJudge
        >>> ExactJudge().affinity(["a", "A", "b"]).tolist()
        [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        """
        unique, inverse = self._unique(texts, item)
        _, affinity = self._pair_table(unique, item)
        return affinity[np.ix_(inverse, inverse)]


def _is_empty(text: str) -> bool:
    return not text.strip()


def _sorted_pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)
