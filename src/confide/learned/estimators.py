r"""The estimators behind the fitted probes and combiners, and the plain file form of a fitted one.

Models are scikit-learn pipelines (view → fill → scale → logistic regression,
or gradient-boosted trees for the combiner), chosen by ``GridSearchCV``
(:func:`selection_search`) and cross-fitted by ``cross_val_predict``
(:func:`confide.learned.fit`). A fitted pipeline is exported as a plain dict
of lists (:func:`export`, JSON-safe: what ``confide fit`` writes under
``params``) and applied from that dict alone (:func:`predict_params`), so a
model file needs no pickle and no scikit-learn version to be read.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from confide.core.errors import InvalidInputError
from confide.metrics.core import UndefinedMetricWarning
from confide.metrics.crossfit import CrossfitCV
from confide.metrics.ranking import auroc_score

__all__ = ["COMBINER_C", "C_GRID", "SELECTION_FOLDS", "auroc", "boosting_classifier",
           "build_pipeline", "candidate_label", "candidates", "export", "export_boosting",
           "fit_boosting", "non_negative_logistic", "normal_scores", "predict_boosting",
           "predict_logistic", "predict_params", "selection_search", "view_selector"]

C_GRID = (0.01, 0.1, 1.0)  # inverse L2 strengths tried by inner cross-validation (probes)
# The logistic combiner's one L2 strength. Measured on five task x model pieces of
# the quality benchmark (21-134 right answers, 42 inputs): C in 0.001-0.01 did
# best out of fold everywhere; choosing C by inner cross-validation among 0.001-1
# cost up to 0.08 PRR and spread several times wider over fold seeds.
COMBINER_C = 0.003
SELECTION_FOLDS = 3  # inner folds choosing layer, C and estimator


def view_selector() -> Any:
    from sklearn.base import BaseEstimator, TransformerMixin

    class View(TransformerMixin, BaseEstimator):
        """The columns of one view (a hidden-state key, or "scores") of the joined matrix."""

        def __init__(self, view: str = "", columns: dict[str, tuple[int, int]] | None = None
                     ) -> None:
            self.view, self.columns = view, columns

        def fit(self, x: np.ndarray, y: Any = None) -> Any:
            return self

        def transform(self, x: np.ndarray) -> np.ndarray:
            start, stop = (self.columns or {})[self.view]
            return x[:, start:stop]

    return View


def non_negative_logistic() -> Any:
    from scipy.optimize import minimize
    from scipy.special import expit
    from sklearn.base import BaseEstimator, ClassifierMixin

    class NonNegativeLogistic(ClassifierMixin, BaseEstimator):
        r"""L2-penalised logistic regression whose input weights are non-negative,

        .. math:: \min_{w \ge 0,\, v,\, b}\ \sum_i \big[\log(1 + e^{z_i}) - y_i z_i\big]
                  + \frac{1}{2C}\big(\lVert w\rVert^2 + \lVert v\rVert^2\big), \quad
                  z_i = w^\top x_i + v^\top m_i + b,

        where :math:`x` are the first half of the columns (confidences, higher = more
        likely correct, so each may only raise the combined confidence) and :math:`m`
        the second half (missing indicators, either sign). scikit-learn's
        ``LogisticRegression`` has no bounds, so this solves the same objective with
        scipy's L-BFGS-B; without binding bounds the two agree (tested). A weight
        stays at 0 rather than turn a scorer upside down on a task where it happened
        to anti-correlate with correctness: that sign flip is what made weights
        learned on one task hurt on another (``benchmarks/combiner.py``)."""

        def __init__(self, C: float = 1.0, max_iter: int = 5000) -> None:
            self.C, self.max_iter = C, max_iter

        def fit(self, x: np.ndarray, y: np.ndarray) -> Any:
            x = np.asarray(x, dtype=np.float64)
            self.classes_ = np.unique(y)
            if self.classes_.size != 2:
                raise ValueError(f"needs two classes; got {self.classes_.size}")
            t = (np.asarray(y) == self.classes_[1]).astype(np.float64)
            d, half = x.shape[1], x.shape[1] // 2

            def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
                w, b = theta[:-1], theta[-1]
                z = x @ w + b
                residual = expit(z) - t
                value = float(np.logaddexp(0.0, z).sum() - t @ z + w @ w / (2 * self.C))
                return value, np.append(x.T @ residual + w / self.C, residual.sum())

            bounds = [(0.0, None)] * half + [(None, None)] * (d - half + 1)
            result = minimize(objective, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                              bounds=bounds, options={"maxiter": self.max_iter})
            self.coef_, self.intercept_ = result.x[None, :-1], result.x[-1:]
            return self

        def decision_function(self, x: np.ndarray) -> np.ndarray:
            return np.asarray(x, dtype=np.float64) @ self.coef_[0] + self.intercept_[0]

        def predict_proba(self, x: np.ndarray) -> np.ndarray:
            p = expit(self.decision_function(x))
            return np.column_stack([1.0 - p, p])

        def predict(self, x: np.ndarray) -> np.ndarray:
            return self.classes_[(self.decision_function(x) > 0).astype(int)]

    return NonNegativeLogistic


def build_pipeline(columns: dict[str, tuple[int, int]], *, combiner: bool, n: int) -> Any:
    """view → standardise → logistic; for the combiner the view's columns first get a
    median fill and normal scores, beside one missing-indicator column per input, and the
    logistic regression keeps the inputs' weights non-negative.

    The boosting candidate replaces the fill and scaling by ``"passthrough"``: its trees
    route NaN along a learned missing branch. ``n`` (training records) bounds the
    quantiles so that every inner training fold has at least as many rows."""
    from sklearn.impute import MissingIndicator, SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.preprocessing import QuantileTransformer, StandardScaler

    impute: Any = "passthrough"
    clf = LogisticRegression(max_iter=5000)
    if combiner:
        quantiles = QuantileTransformer(n_quantiles=max(2, min(1000, n // 2)),
                                        output_distribution="normal", subsample=None)
        impute = FeatureUnion([
            ("fill", Pipeline([("median", SimpleImputer(strategy="median",
                                                        keep_empty_features=True)),
                               ("quantiles", quantiles)])),
            ("missing", MissingIndicator(features="all"))])
        clf = non_negative_logistic()(C=COMBINER_C)
    return Pipeline([("view", view_selector()(columns=columns)), ("impute", impute),
                     ("scale", StandardScaler()), ("clf", clf)])


def boosting_classifier(seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier

    return HistGradientBoostingClassifier(max_iter=100, learning_rate=0.05, max_leaf_nodes=8,
                                          min_samples_leaf=10, l2_regularization=1.0,
                                          early_stopping=False, random_state=seed)


def export(pipe: Any) -> dict[str, Any]:
    """The fitted pipeline as plain lists: what :func:`predict_params` applies."""
    clf = pipe.named_steps["clf"]
    if not hasattr(clf, "coef_"):
        return export_boosting(clf)
    impute, scale = pipe.named_steps["impute"], pipe.named_steps["scale"]
    indicators = impute != "passthrough"
    width = int(scale.mean_.size // 2 if indicators else scale.mean_.size)
    out: dict[str, Any] = {"type": "logistic", "C": float(clf.C), "indicators": indicators}
    if indicators:
        fill = impute.named_transformers["fill"]
        quantiles = fill.named_steps["quantiles"]
        out.update(fill=fill.named_steps["median"].statistics_.tolist(),
                   quantiles=quantiles.quantiles_.T.tolist(),
                   references=quantiles.references_.tolist())
    else:
        out["fill"] = [0.0] * width
    return out | {"mean": scale.mean_.tolist(), "scale": scale.scale_.tolist(),
                  "coef": clf.coef_[0].tolist(), "intercept": float(clf.intercept_[0])}


# sklearn's QuantileTransformer: values within this of the training extremes map to them
_QUANTILE_BOUND = 1e-7


def normal_scores(x: np.ndarray, quantiles: np.ndarray, references: np.ndarray
                   ) -> np.ndarray:
    r"""Each column through its training quantiles to a standard-normal score,
    :math:`z = \Phi^{-1}(\hat F(x))`, as scikit-learn's ``QuantileTransformer``
    (``output_distribution="normal"``) computes it: :math:`\hat F` interpolates
    the quantiles upwards and downwards and averages the two (so tied quantiles
    map to their middle), values at or beyond the extremes map to 0 or 1, and
    :math:`z` is clipped to :math:`\Phi^{-1}(10^{-7})`."""
    from scipy.stats import norm

    out = np.empty_like(x)
    edge = _QUANTILE_BOUND - np.spacing(1)
    for j in range(x.shape[1]):
        q, col = quantiles[j], x[:, j]
        up = np.interp(col, q, references)
        down = -np.interp(-col, -q[::-1], -references[::-1])
        f = 0.5 * (up + down)
        f = np.where(col + _QUANTILE_BOUND > q[-1], 1.0, f)
        f = np.where(col - _QUANTILE_BOUND < q[0], 0.0, f)
        with np.errstate(divide="ignore"):
            out[:, j] = np.clip(norm.ppf(f), norm.ppf(edge), norm.ppf(1 - edge))
    return out


def _with_indicators(x: np.ndarray, p: dict[str, Any]) -> np.ndarray:
    """NaN → the training median, then normal scores, beside one 0/1 missing-indicator
    column per input. Files written before the normal scores have no quantiles and are
    applied as they were fitted."""
    missing = np.isnan(x)
    filled = np.where(missing, np.asarray(p["fill"]), x)
    if "quantiles" in p:
        filled = normal_scores(filled, np.asarray(p["quantiles"]),
                                np.asarray(p["references"]))
    return np.hstack([filled, missing.astype(np.float64)])


def predict_logistic(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    z = _with_indicators(x, p) if p["indicators"] else x
    logit = ((z - np.asarray(p["mean"])) / np.asarray(p["scale"])) @ np.asarray(p["coef"]) \
        + p["intercept"]
    return 1.0 / (1.0 + np.exp(-logit))


_TREE_FIELDS = ("value", "feature_idx", "num_threshold", "missing_go_to_left", "left", "right",
                "is_leaf")


def export_boosting(model: Any) -> dict[str, Any]:
    trees = []
    for per_class in model._predictors:  # binary: one tree per iteration
        nodes = per_class[0].nodes
        if nodes["is_categorical"].any():  # pragma: no cover - we never pass categories
            raise InvalidInputError("categorical splits cannot be exported", field="features")
        trees.append({f: nodes[f].tolist() for f in _TREE_FIELDS})
    return {"type": "boosting", "baseline": float(np.ravel(model._baseline_prediction)[0]),
            "trees": trees}


def fit_boosting(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, Any]:
    return export_boosting(boosting_classifier(seed).fit(x, y))


def predict_boosting(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    raw = np.full(x.shape[0], p["baseline"], dtype=np.float64)
    for tree in p["trees"]:
        is_leaf, feat = tree["is_leaf"], tree["feature_idx"]
        thr, go_left = tree["num_threshold"], tree["missing_go_to_left"]
        left, right, value = tree["left"], tree["right"], tree["value"]
        for i in range(x.shape[0]):
            node = 0
            while not is_leaf[node]:
                v = x[i, feat[node]]
                node = left[node] if (go_left[node] if math.isnan(v) else v <= thr[node]) \
                    else right[node]
            raw[i] += value[node]
    return 1.0 / (1.0 + np.exp(-raw))


def predict_params(p: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return predict_boosting(p, x) if p["type"] == "boosting" else predict_logistic(p, x)


# ------------------------------------------------------------------ selection and cross-fitting


def auroc(score: np.ndarray, y: np.ndarray) -> float:
    """:func:`confide.metrics.auroc_score` of ``score`` for the labels ``y`` (1 = right),
    NaN without a warning when ``y`` holds one class only.

    A fold or a training set with one class is an expected case while fitting, not an
    input error: NaN never wins a selection (``auc > best`` is false) and is reported
    as null. A NaN score raises :class:`~confide.core.errors.InvalidInputError`.

    >>> auroc(np.array([0.9, 0.4, 0.6, 0.4]), np.array([1, 0, 1, 1])), auroc(np.ones(2), np.ones(2))
    (0.8333333333333334, nan)
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        return auroc_score(score, y)


def candidates(keys: list[str], *, combiner: bool, logistic: bool, boosting: bool, seed: int
          ) -> list[dict[str, Any]]:
    """Candidates: each view with each C of :data:`C_GRID` (the combiner: its one view,
    non-negative weights, at :data:`COMBINER_C`), and the boosted trees."""
    from sklearn.linear_model import LogisticRegression

    grid: list[dict[str, Any]] = []
    if logistic:
        if combiner:
            grid.append({"view__view": keys, "clf": [non_negative_logistic()()],
                         "clf__C": [COMBINER_C]})
        else:
            grid.append({"view__view": keys, "clf": [LogisticRegression(max_iter=5000)],
                         "clf__C": list(C_GRID)})
    if boosting:
        grid.append({"view__view": ["scores"], "impute": ["passthrough"],
                     "scale": ["passthrough"], "clf": [boosting_classifier(seed)]})
    return grid


def candidate_label(params: dict[str, Any]) -> str:
    c = params.get("clf__C")
    estimator = "boosting" if "impute" in params else "logistic"
    return f"{params['view__view']} {estimator}" + ("" if c is None else f" C={c:g}")


def selection_search(pipe: Any, grid: list[dict[str, Any]], *, n_folds: int, seed: int) -> Any:
    """The candidate with the best inner cross-validated AUROC (the first one on ties),
    refitted on all the rows it is given; with one candidate, just that one."""
    from sklearn.model_selection import GridSearchCV

    n_candidates = sum(math.prod(len(v) for v in g.values()) for g in grid)
    if n_candidates == 1:
        return pipe.set_params(**{k: v[0] for k, v in grid[0].items()})
    return GridSearchCV(pipe, grid, scoring="roc_auc", error_score="raise", refit=True,
                        cv=CrossfitCV(min(n_folds, SELECTION_FOLDS), seed))

