r"""The fitted object: a probe, lens probe or combiner, its file and how it is applied.

:class:`Learned` holds the final model (``params``, the plain form of
:mod:`confide.learned.estimators`), the out-of-fold score of each training
item and the training run's identity. :meth:`Learned.save` writes plain JSON
(no pickle, format :data:`FORMAT`); :meth:`Learned.load` reads it back.
Applying it goes through the registered scorer of its kind
(:mod:`confide.scorers.fitted`) and :func:`~confide.scorers.run_scorer`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from confide.core.errors import CannotScore, ConfigMismatch, InvalidInputError
from confide.core.paths import write_text
from confide.core.records import Record
from confide.learned.estimators import predict_params
from confide.learned.schema import TOKEN_FEATURES, check_file, input_width
from confide.scorers import ScoringContext, run_scorer, scorer_at
from confide.scorers.fitted import fitted_context

__all__ = ["FORMAT", "KINDS", "TOKEN_FEATURES", "Kind", "Learned", "feature_matrix",
           "chosen_hidden_keys", "hidden_keys", "model_label", "token_features"]

FORMAT = "confide-learned/1"
KINDS = ("probe", "lens", "combiner")
Kind = Literal["probe", "lens", "combiner"]
_FINAL = "fitted:final"  # the context's cache entry of a record's final-model score


def model_label(backend: dict[str, Any]) -> str:
    """How messages name the model of a backend identity: ``model 'smollm2' (backend 'hf')``."""
    model, name = backend.get("model"), backend.get("backend")
    return f"model {model or '(unnamed)'!r}" + (f" (backend {name!r})" if name else "")


def token_features(record: Record) -> np.ndarray:
    """The greedy answer's token-probability features, in :data:`TOKEN_FEATURES` order.

    NaN where the backend gave no such statistic or the answer is empty.

    >>> from confide.core.records import Generation, Item
    >>> g = Generation("a b", token_ids=[1, 2], token_logprobs=np.array([-1.0, -3.0]))
    >>> token_features(Record(Item("x", "q"), g))[[0, 1, 5]].round(3).tolist()
    [-2.0, -3.0, 1.099]
    """
    g = record.greedy
    out = np.full(len(TOKEN_FEATURES), np.nan)
    n = g.n_tokens
    if n == 0:
        return out
    reductions: tuple[tuple[np.ndarray | None, Callable[[np.ndarray], Any]], ...] = (
        (g.token_logprobs, np.mean), (g.token_logprobs, np.min), (g.token_entropies, np.mean),
        (g.token_entropies, np.max), (g.token_kl_uniform, np.mean))
    for j, (values, reduce) in enumerate(reductions):
        if values is not None and len(values):
            out[j] = float(reduce(np.asarray(values, dtype=np.float64)))
    out[5] = math.log1p(n)
    return out


def _hidden(record: Record, layer: str) -> np.ndarray | None:
    hidden = record.greedy.hidden or {}
    vec = hidden.get(layer)
    return None if vec is None else np.asarray(vec, dtype=np.float64)


def hidden_keys(records: Sequence[Record]) -> list[str]:
    """Hidden-state keys present in every record (sorted by layer, then pool)."""
    keys: set[str] | None = None
    for r in records:
        have = set((r.greedy.hidden or {}).keys())
        keys = have if keys is None else keys & have
    def order(k: str) -> tuple[int, str]:
        layer, _, pool = k.partition(":")
        return (int(layer) if layer.lstrip("-").isdigit() else 0, pool)
    return sorted(keys or (), key=order)


def chosen_hidden_keys(records: Sequence[Record], layer: str | None) -> list[str]:
    """The hidden-state keys a fit reads: every stored one for ``layer`` None or
    ``"best"``, else ``layer`` (``8`` means ``8:mean``), which every record must hold."""
    available = hidden_keys(records)
    if not available:
        raise InvalidInputError("the records hold no hidden states; run with "
                                "--hidden-layers (e.g. 8,16,-1)", field="hidden_layers")
    if layer in (None, "best"):
        return available
    key = layer if ":" in layer else f"{layer}:mean"
    if key not in available:
        raise InvalidInputError(f"no hidden state {key!r} in every record; stored: "
                                f"{', '.join(available)}", field="layer")
    return [key]


@dataclass
class Learned:
    """A fitted probe, lens probe or combiner, with what it needs to be applied honestly.

    ``params`` holds the final estimator (fitted on all training records);
    ``oof`` maps each training item id to its cross-fitted score; ``report``
    holds weights or importances and the cross-validation table. A probe fitted on
    several runs (:mod:`confide.learned.multitask`) has ``multitask``: the weighting,
    the probe applied to new runs and, per task, its run, counts, out-of-fold scores
    (``oof`` stays empty) and learned log-variance; None otherwise (and not written).
    """

    kind: str
    name: str
    model: dict[str, Any]
    layer: str | None
    features: list[str]
    params: dict[str, Any]
    training: dict[str, Any]
    oof: dict[str, float] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    multitask: dict[str, Any] | None = None
    kinds: ClassVar[tuple[str, ...]] = KINDS  # what load() accepts (density adds its own)
    #: the file it was read from (:meth:`load`), named in the errors of applying it
    source: str | None = field(default=None, compare=False, repr=False)

    # -- persistence ----------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["source"]
        if out["multitask"] is None:  # single-run files stay as they were
            del out["multitask"]
        return {"format": FORMAT, **out}

    def save(self, path: str | Path) -> Path:
        """Write this model as JSON (floats round-trip exactly; no pickle), whole or not at
        all (:func:`~confide.core.paths.write_text`)."""
        return write_text(path, json.dumps(self.to_dict(), allow_nan=False, indent=1), "--out")

    @classmethod
    def load(cls, path: str | Path) -> Learned:
        """Read a model written by :meth:`save`, checked field by field
        (:func:`~confide.learned.schema.check_file`): a file edited by hand or cut short
        is refused with an :class:`~confide.core.errors.InvalidInputError` naming the file
        and the field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidInputError(f"cannot read: {exc.strerror or exc}", file=str(path),
                                    field="--with") from exc
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"not UTF-8 text (byte {exc.start}); a fit file is the "
                                    "JSON `confide fit` writes", file=str(path)) from exc
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"not JSON: {exc.msg} (column {exc.colno}); the file is "
                                    "damaged or cut short: fit the model again (`confide "
                                    "fit`)", file=str(path), line=exc.lineno) from exc
        except RecursionError as exc:
            raise InvalidInputError("not a fit file: JSON nested too deeply",
                                    file=str(path)) from exc
        check_file(data, str(path), kinds=cls.kinds, format_=FORMAT)
        known = {f.name for f in fields(cls)} - {"source"}
        unknown = sorted(set(data) - known - {"format"})
        if unknown:
            raise InvalidInputError(f"unknown field(s) {', '.join(unknown)}; a fit file holds "
                                    f"{', '.join(sorted(known))}", file=str(path),
                                    field=unknown[0])
        return cls(**{k: v for k, v in data.items() if k in known}, source=str(path))

    @property
    def label(self) -> str:
        """How messages name it: its file, or its kind and score name."""
        return self.source or f"{self.kind} {self.name!r}"

    # -- applying -------------------------------------------------------------------

    def model_name(self) -> str:
        """The model it was fitted on, as messages name it."""
        return model_label(self.model)

    def check_compatible(self, backend: dict[str, Any], *, allow_other_model: bool = False
                         ) -> str | None:
        """Refuse a run generated by another model than the training run's.

        Hidden states (``probe``, ``lens``, density kinds) and scorer outputs (a
        ``combiner``: their scales and what they mean for correctness) are the model's
        own. ``allow_other_model`` applies it anyway and returns the note saying so
        (None when the models agree).

        Raises
        ------
        ConfigMismatch : the models differ and ``allow_other_model`` is false.
        """
        keys = ("model",) if self.kind == "combiner" else ("backend", "model")
        if all(self.model.get(k) == backend.get(k) for k in keys):
            return None
        what = "hidden states" if self.kind != "combiner" else "scores"
        note = (f"{self.name} ({self.label}) was fitted on {what} of {self.model_name()} and "
                f"applied to a run of {model_label(backend)}")
        if allow_other_model:
            return note + " (--allow-other-model)"
        raise ConfigMismatch(
            f"{self.label}: model: this {self.kind} was fitted on {what} of "
            f"{self.model_name()}; the run was generated by {model_label(backend)}. "
            + ("Hidden states do not carry over between models"
               if self.kind != "combiner" else "Scores of another model mean something else")
            + "; fit it on a run of this model, or pass --allow-other-model "
            "(allow_other_model=True) to apply it anyway.")

    def features_of(self, records: Sequence[Record]) -> tuple[np.ndarray, list[str | None]]:
        """Feature matrix for ``records`` and, per row, why it cannot be scored (or None)."""
        return feature_matrix(self.kind, self.layer, self.features, records,
                              width=input_width(self.kind, self.params, len(self.features)))

    def predict(self, records: Sequence[Record]) -> list[tuple[float, str | None]]:
        """Final-model scores (no cross-fitting) of every record, training items too:
        ``(confidence, None)`` or ``(nan, why)``, through
        :func:`~confide.scorers.run_scorer` (an empty answer gets NaN)."""
        return self._applied(records, fitted_context(self, final=True))

    def apply(self, records: Sequence[Record], *, run: str, backend: dict[str, Any],
              allow_other_model: bool = False) -> list[tuple[float, str | None]]:
        """Scores for a run's records, honest about training data.

        On the training run itself (same :func:`~confide.learned.run_digest`) a
        training item gets its out-of-fold score; on another run an item id the
        model was trained on gets NaN; every other item gets the final model's
        score. Each goes through :func:`~confide.scorers.run_scorer` with the
        registered scorer of this kind (:mod:`confide.scorers.fitted`), so an
        empty answer gets NaN with the reason and a non-finite value NaN. A run of
        another model is refused unless ``allow_other_model``
        (:meth:`check_compatible`).
        """
        self.check_compatible(backend, allow_other_model=allow_other_model)
        return self._applied(records, fitted_context(self, run=run))

    def confidence(self, record: Record, ctx: ScoringContext) -> float:
        """One record's confidence: what the registered scorer of this kind returns.

        Raises :class:`~confide.core.errors.CannotScore` with the reason (no hidden
        state, an item of the training set on another run, ...).
        """
        item = record.item.id
        fitted = ctx.fitted
        if fitted is not None and not fitted.final and item in self._trained:
            own = self.oof_of(fitted.run)
            if own is not None and item in own:
                return float(own[item])
            raise CannotScore(f"{self.kind}: item was in its training set")
        value, why = ctx.cached(record, _FINAL, lambda: self._scores([record])[0])
        if why is not None:
            raise CannotScore(why)
        return value

    def oof_of(self, run: str | None) -> dict[str, float] | None:
        """The out-of-fold scores of training run ``run`` (a
        :func:`~confide.learned.run_digest`), or None when it is no training run."""
        if run is None:
            return None
        if self.multitask is not None:
            return next((t["oof"] for t in self.multitask["tasks"]
                         if t.get("run_digest") == run), None)
        return self.oof if run == self.training.get("run_digest") else None

    @functools.cached_property
    def _trained(self) -> frozenset[str]:
        return frozenset(self.training.get("item_ids", []))

    def _applied(self, records: Sequence[Record], ctx: ScoringContext
                 ) -> list[tuple[float, str | None]]:
        # The final model's scores in one batch (a density's Gaussians fitted once), read
        # back per record by the registered scorer.
        for record, pair in zip(records, self._scores(records), strict=True):
            ctx.features[(record.item.id, _FINAL)] = pair
        spec = scorer_at(self.kind)
        return [run_scorer(spec, record, ctx) for record in records]

    def _scores(self, records: Sequence[Record]) -> list[tuple[float, str | None]]:
        """The final model's raw outputs: ``(value, None)`` or ``(nan, why)`` per record."""
        x, why = self.features_of(records)
        out: list[tuple[float, str | None]] = [(math.nan, w) for w in why]
        ok = [i for i, w in enumerate(why) if w is None]
        if ok:
            scores = predict_params(self.params, x[ok])
            for i, s in zip(ok, scores, strict=True):
                out[i] = (float(s), None)
        return out


def feature_matrix(kind: str, layer: str | None, names: Sequence[str],
                   records: Sequence[Record], *, width: int | None = None
                   ) -> tuple[np.ndarray, list[str | None]]:
    """Rows of ``kind``'s inputs for ``records`` and, per row, why it has none (or None).

    ``width``: the hidden-state length a fitted model reads; a record whose state has
    another length gets a reason (a run of another model), not a row of zeros."""
    rows: list[np.ndarray] = []
    why: list[str | None] = []
    for r in records:
        if kind == "combiner":
            rows.append(np.array([r.scores.get(n, math.nan) for n in names], dtype=np.float64))
            why.append(None)
            continue
        if layer is None:
            raise InvalidInputError(f"a {kind} reads a hidden state; no layer given",
                                    field="layer")
        vec = _hidden(r, layer)
        if vec is None:
            rows.append(np.zeros(0))
            why.append(f"{kind}: no hidden state {layer} in the record (run with "
                       f"--hidden-layers {layer.split(':')[0]})")
            continue
        if width and vec.size != width:
            rows.append(np.zeros(0))
            why.append(f"{kind}: the record's hidden state {layer} has {vec.size} numbers; the "
                       f"model reads {width} (a state of another model?)")
            continue
        if kind == "lens":
            tok = token_features(r)
            if np.isnan(tok).any():
                rows.append(np.zeros(0))
                why.append("lens: the record lacks token statistics")
                continue
            vec = np.concatenate([vec, tok])
        rows.append(vec)
        why.append(None)
    size = max((len(v) for v, w in zip(rows, why, strict=True) if w is None), default=0)
    x = np.zeros((len(rows), size))
    for i, v in enumerate(rows):
        if why[i] is None and len(v) == size:
            x[i] = v
        elif why[i] is None:  # fitting: states of one key must have one length
            why[i] = (f"{kind}: the record's hidden state {layer} has {len(v)} numbers; "
                      f"other records' have {size}")
    return x, why
