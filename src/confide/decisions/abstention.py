r"""Abstention with a guarantee: answer only when confident, with at most α errors among answers.

Given a calibration sample of :math:`n` graded answers with confidences
:math:`c_i` and losses :math:`L_i = 1 - y_i \in \{0, 1\}`, choose a
threshold :math:`\hat\lambda` and answer exactly when :math:`c \ge \hat\lambda`,
so that the *selective risk* — the error rate among answered items —

.. math:: R(\lambda) = P(\text{wrong} \mid c \ge \lambda)

satisfies

.. math:: P\big(R(\hat\lambda) \le \alpha\big) \ge 1 - \delta

over the draw of the calibration sample, for new items from the same
distribution. If no threshold can be certified, the policy abstains on
everything (and says so).

Method: Learn then Test (Angelopoulos, Bates, Candès, Jordan & Lei, 2021)
------------------------------------------------------------------------
1. **Grid and order.** The candidate thresholds :math:`\lambda_1, \dots, \lambda_m`
   and the order in which they are tested must not depend on the items used
   for testing. By default a random ``grid_fraction`` of the calibration items
   (25%) is set aside: its confidence quantiles are the grid, and the
   thresholds are tested in increasing order of the p-value this split
   predicts for the testing part (ties: the higher threshold first), so the
   sequence starts where a rejection is most likely — not at the highest
   threshold, where too few items are answered to reject anything (at least
   :math:`n_{\min} = \lceil \log\delta / \log(1-\alpha) \rceil` are needed even
   with no error). Those items are not used again. With a user-given grid and
   ``grid_fraction=0``, every item tests and the order is from the highest
   threshold down.
2. **p-values.** For each :math:`\lambda_j`, on the testing items: :math:`n_j`
   answered, :math:`k_j` of them wrong. Given :math:`n_j`, the answered items
   are i.i.d. draws from the distribution conditioned on :math:`c \ge \lambda_j`,
   so :math:`k_j \sim \mathrm{Bin}(n_j, R(\lambda_j))` and the binomial tail

   .. math:: p_j = P\big(\mathrm{Bin}(n_j, \alpha) \le k_j\big)

   is a valid p-value for :math:`H_j: R(\lambda_j) > \alpha` (super-uniform
   under :math:`H_j`; :math:`p_j = 1` when :math:`n_j = 0`).
3. **Fixed-sequence testing.** Test :math:`H_1, H_2, \dots` in order, each at
   level :math:`\delta`, and stop at the first :math:`p_j > \delta`. This
   controls the family-wise error rate at :math:`\delta` for any fixed order,
   with no multiplicity correction, so every rejected threshold has
   :math:`R \le \alpha` simultaneously with probability at least
   :math:`1 - \delta`. :math:`\hat\lambda` is the lowest rejected threshold:
   the largest certified coverage.

Why LTT and not conformal risk control: conformal risk control (Angelopoulos
et al., 2022) bounds the *expected* risk over calibration draws,
:math:`E[R] \le \alpha`, and needs a loss monotone in :math:`\lambda`; the
selective risk is a ratio that is not monotone, and the question users ask
("at most 5% errors, with 95% confidence") is the high-probability statement
LTT gives.

The guarantee assumes calibration and future items are exchangeable (i.i.d.)
and the confidence is computed the same way; a calibrator used to transform
the confidence must be fitted on other items (another run). The loss must be
binary (a binary grader such as ``exact``, ``contains``, ``choice``,
``numeric``).

References
----------
[1] A. N. Angelopoulos, S. Bates, E. J. Candès, M. I. Jordan, L. Lei (2021).
    Learn then Test: Calibrating Predictive Algorithms to Achieve Risk Control.
    arXiv:2110.01052.
[2] Y. Geifman, R. El-Yaniv (2017). Selective Classification for Deep Neural
    Networks (selective risk with a guarantee). NeurIPS.
[3] A. N. Angelopoulos, S. Bates, A. Fisch, L. Lei, T. Schuster (2022).
    Conformal Risk Control. arXiv:2208.02814.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from confide.core.errors import InvalidInputError
from confide.core.jsonsafe import json_safe
from confide.decisions._runs import run_column
from confide.decisions.calibration import check_header, read_json, write_json
from confide.metrics.core import check_confidence_correct, check_count

if TYPE_CHECKING:
    from confide.decisions.calibration import Calibrator

__all__ = ["METHOD", "AbstentionFit", "AbstentionPolicy", "abstain_run", "binomial_p_value",
           "fit_abstention", "load_policy", "min_answered"]

METHOD = "ltt-binomial-fixed-sequence"
_KIND = "confide.policy"
_VERSION = 1
FloatArray = NDArray[np.float64]


# --------------------------------------------------------------------------- the policy


@dataclass
class AbstentionPolicy:
    """Answer when ``confidence >= threshold``, else abstain (NaN always abstains).

    ``scorer`` names the raw confidence read, or is ``None`` for a calibrated
    probability (from a calibrator of ``calibrator_scorer``). ``feasible`` is
    False when no threshold was certified; then ``threshold`` is ``inf`` and
    every answer is withheld. ``coverage`` is the share of calibration items
    answered at the threshold; ``risk`` the error rate among the answered
    testing items; ``risk_upper`` the one-sided :math:`1-\\delta`
    Clopper–Pearson bound at the chosen threshold (not adjusted for the choice;
    the guaranteed bound is ``alpha``).
    """

    scorer: str | None
    threshold: float
    alpha: float
    delta: float
    feasible: bool
    coverage: float
    risk: float
    risk_upper: float
    p_value: float
    n_answered: int
    n_errors: int
    n_test: int
    n_grid: int
    method: str = METHOD
    calibrator_scorer: str | None = None
    grader: str | None = None
    source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def decide(self, confidence: float) -> str:
        """``"answer"`` if ``confidence >= threshold``, else ``"abstain"``.

        >>> p = AbstentionPolicy("msp", 0.5, 0.1, 0.1, True, 0.4, 0.05, 0.09, 0.01, 40, 2, 100, 25)
        >>> p.decide(0.7), p.decide(0.2), p.decide(float("nan"))
        ('answer', 'abstain', 'abstain')
        """
        c = float(confidence)
        return "answer" if not math.isnan(c) and c >= self.threshold else "abstain"

    def answers(self, confidence: ArrayLike) -> NDArray[np.bool_]:
        """Boolean mask of the items answered (vectorised :meth:`decide`)."""
        c = np.asarray(confidence, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            return np.asarray(c >= self.threshold) & ~np.isnan(c)

    @property
    def guarantee(self) -> str:
        """The promise in words."""
        reads = self.scorer or f"calibrated {self.calibrator_scorer or 'confidence'}"
        if not self.feasible:
            return (f"no threshold on {reads} certifies an error rate <= {self.alpha:g} at "
                    f"confidence {1 - self.delta:g}; abstain on every item")
        return (f"answer when {reads} >= {self.threshold:.6g}: with probability >= "
                f"{1 - self.delta:g} over the calibration sample, the error rate among "
                f"answered items is <= {self.alpha:g}")

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        # JSON has no inf or NaN: an infeasible policy stores null
        for name in ("threshold", "risk", "risk_upper"):
            d[name] = json_safe(d[name])
        return {"kind": _KIND, "version": _VERSION, **d}

    @classmethod
    def from_dict(cls, d: Any, *, file: str | None = None) -> AbstentionPolicy:
        check_header(d, _KIND, _VERSION, file)
        if d.get("method") != METHOD:
            raise InvalidInputError(f"unknown method {d.get('method')!r}", file=file,
                                    field="method")
        scorer = d.get("scorer")
        if scorer is not None and (not isinstance(scorer, str) or not scorer):
            raise InvalidInputError("must be a scorer name or null", file=file, field="scorer")
        feasible = d.get("feasible")
        if not isinstance(feasible, bool):
            raise InvalidInputError("must be true or false", file=file, field="feasible")
        threshold = d.get("threshold")
        if threshold is None:
            if feasible:
                raise InvalidInputError("a feasible policy needs a threshold", file=file,
                                        field="threshold")
            threshold = math.inf
        values: dict[str, Any] = {}
        for name in ("threshold", "alpha", "delta", "coverage", "risk", "risk_upper",
                     "p_value"):
            raw = threshold if name == "threshold" else d.get(name)
            if raw is None and name in ("risk", "risk_upper") and not feasible:
                raw = math.nan
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise InvalidInputError(f"must be a number, got {raw!r}", file=file, field=name)
            values[name] = float(raw)
        for name in ("alpha", "delta"):
            if not 0 < values[name] < 1:
                raise InvalidInputError(f"must lie in (0, 1), got {values[name]!r}", file=file,
                                        field=name)
        for name in ("n_answered", "n_errors", "n_test", "n_grid"):
            raw = d.get(name)
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
                raise InvalidInputError(f"must be a count, got {raw!r}", file=file, field=name)
            values[name] = raw
        return cls(scorer=scorer, feasible=feasible, method=METHOD,
                   calibrator_scorer=d.get("calibrator_scorer"), grader=d.get("grader"),
                   source=d.get("source"), extra=dict(d.get("extra") or {}), **values)

    def save(self, path: str | Path) -> Path:
        """Write the policy as JSON (``threshold: null`` when it abstains on all)."""
        return write_json(path, self.to_dict())


def load_policy(path: str | Path) -> AbstentionPolicy:
    """Read a policy saved by :meth:`AbstentionPolicy.save` (errors name file and field)."""
    return AbstentionPolicy.from_dict(read_json(path), file=str(path))


# --------------------------------------------------------------------------- the maths


def binomial_p_value(n_errors: int | NDArray[np.int64], n_answered: int | NDArray[np.int64],
                     alpha: float) -> FloatArray:
    r"""Binomial tail p-value of :math:`H: R > \alpha` given :math:`k` errors in :math:`n`.

    .. math:: p = P(\mathrm{Bin}(n, \alpha) \le k) = \sum_{j=0}^{k} \binom{n}{j}
              \alpha^j (1-\alpha)^{n-j}

    (1 when :math:`n = 0`). Angelopoulos et al. (2021), "Learn then Test", §3.

    >>> float(binomial_p_value(0, 10, 0.1)).__round__(4)  # 0.9 ** 10
    0.3487
    """
    from scipy import stats

    k = np.asarray(n_errors)
    n = np.asarray(n_answered)
    return np.where(n > 0, stats.binom.cdf(k, np.maximum(n, 1), alpha), 1.0)


def min_answered(alpha: float, delta: float) -> int:
    r"""Fewest answered items at which a threshold can be certified (with zero errors).

    .. math:: n_{\min} = \min\{n : (1-\alpha)^n \le \delta\}
              = \lceil \log\delta / \log(1-\alpha) \rceil

    >>> min_answered(0.05, 0.05), min_answered(0.1, 0.1)
    (59, 22)
    """
    n = math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)
    return max(n, 1)


@dataclass
class AbstentionFit:
    """A fitted policy and the test sequence behind it.

    ``thresholds`` in test order, with ``n_answered``,
    ``n_errors``, ``p_values`` on the testing items and ``rejected`` (the
    prefix of certified thresholds).
    """

    policy: AbstentionPolicy
    thresholds: FloatArray
    n_answered: NDArray[np.int64]
    n_errors: NDArray[np.int64]
    p_values: FloatArray
    rejected: NDArray[np.bool_]


def _check_level(value: float, name: str) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be a number, got {value!r}", field=name) from exc
    if not 0 < value < 1:
        raise InvalidInputError(f"must lie in (0, 1), got {value!r}", field=name)
    return value


def fit_abstention(confidence: ArrayLike, correct: ArrayLike, *, alpha: float = 0.1,
                   delta: float = 0.1, grid: ArrayLike | None = None,
                   grid_fraction: float = 0.25, n_grid: int = 100, seed: int = 0,
                   scorer: str | None = "confidence") -> AbstentionFit:
    r"""Choose the threshold with the largest coverage whose selective risk is certified.

    .. math:: \hat\lambda = \lambda_{J}, \quad J = \max\{j : p_1, \dots, p_j \le \delta\},
              \qquad P\big(R(\hat\lambda) \le \alpha\big) \ge 1 - \delta

    (Learn then Test with binomial p-values and fixed-sequence testing; the
    module docstring states the procedure and its assumptions.)

    Parameters
    ----------
    confidence : array of shape (n,)
        Confidences (higher = more likely correct), finite or ±inf, no NaN.
    correct : array of shape (n,), binary {0, 1}
    alpha : float in (0, 1), default 0.1
        The largest tolerated error rate among answered items.
    delta : float in (0, 1), default 0.1
        The probability that the calibration sample misleads.
    grid : array, optional
        Candidate thresholds. Default: the confidence quantiles of the grid split.
    grid_fraction : float in [0, 1), default 0.25
        Share of items set aside (at random, ``seed``) to place the grid and
        order the tests; 0 uses every item for testing (needs ``grid``; the
        order is then from the highest threshold down).
    n_grid : int >= 2, default 100
        Quantiles of the grid split used as candidate thresholds.
    seed : int, default 0
    scorer : str or None
        The name stored in the policy (None: a calibrated probability).

    Returns
    -------
    AbstentionFit
        ``.policy`` with ``feasible=False`` and ``threshold=inf`` when no
        threshold is certified (abstain on every item).

    Raises
    ------
    InvalidInputError
        On NaN confidence, non-binary correctness, bad levels or too few items.

    Examples
    --------
    >>> conf = list(range(100))
    >>> correct = [0] * 20 + [1] * 80          # the 80 most confident are right
    >>> fit = fit_abstention(conf, correct, alpha=0.1, delta=0.1, grid=[70, 50, 30, 10, 0],
    ...                      grid_fraction=0)
    >>> fit.policy.threshold, fit.policy.coverage
    (30.0, 0.7)
    """
    alpha, delta = _check_level(alpha, "alpha"), _check_level(delta, "delta")
    conf, corr = check_confidence_correct(confidence, correct, "raise")
    if not np.isin(corr, (0.0, 1.0)).all():
        raise InvalidInputError("the guarantee needs binary correctness (a binary grader such "
                                "as exact, contains, choice or numeric)", field="correct")
    try:
        grid_fraction = float(grid_fraction)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"must be a number, got {grid_fraction!r}",
                                field="grid_fraction") from exc
    if not 0 <= grid_fraction < 1:
        raise InvalidInputError(f"must lie in [0, 1), got {grid_fraction!r}",
                                field="grid_fraction")
    n_grid = check_count(n_grid, "n_grid", minimum=2)
    n = conf.size
    n_aside = int(round(grid_fraction * n))
    if grid is None and n_aside == 0:
        raise InvalidInputError("without a grid, some items must place it: grid_fraction > 0 "
                                f"(got {grid_fraction} of {n} items)", field="grid_fraction")
    if n - n_aside < 1:
        raise InvalidInputError(f"no items left for testing ({n} items)", field="grid_fraction")
    order = np.random.default_rng(seed).permutation(n)
    aside, test = order[:n_aside], order[n_aside:]
    if grid is None:
        cand = np.quantile(conf[aside], np.linspace(0.0, 1.0, n_grid), method="inverted_cdf")
    else:
        cand = np.asarray(grid, dtype=np.float64).ravel()
        if cand.size == 0 or np.isnan(cand).any():
            raise InvalidInputError("must be a non-empty list of numbers", field="grid")
    thresholds = np.unique(cand)[::-1]
    if n_aside:  # order by the p-value the grid split predicts for the testing part
        predicted = _predicted_p_values(conf[aside], corr[aside], thresholds, test.size, alpha)
        thresholds = thresholds[np.lexsort((-thresholds, predicted))]
    c_test, wrong = conf[test], 1.0 - corr[test]
    answered = c_test[None, :] >= thresholds[:, None]
    n_ans = answered.sum(axis=1).astype(np.int64)
    n_err = (answered * wrong[None, :]).sum(axis=1).round().astype(np.int64)
    p = binomial_p_value(n_err, n_ans, alpha)
    rejected = np.cumprod(p <= delta).astype(bool)
    n_rej = int(rejected.sum())
    if n_rej:
        j = int(np.argmin(np.where(rejected, thresholds, np.inf)))  # lowest certified
        lam = float(thresholds[j])
        coverage = float(np.mean(conf >= lam))
        risk = float(n_err[j] / n_ans[j])
        upper = _clopper_pearson_upper(int(n_err[j]), int(n_ans[j]), delta)
        policy = AbstentionPolicy(scorer, lam, alpha, delta, True, coverage, risk, upper,
                                  float(p[j]), int(n_ans[j]), int(n_err[j]), int(test.size),
                                  int(n_aside))
    else:
        first_p = float(p[0]) if p.size else 1.0
        policy = AbstentionPolicy(scorer, math.inf, alpha, delta, False, 0.0, math.nan, math.nan,
                                  first_p, 0, 0, int(test.size), int(n_aside))
    return AbstentionFit(policy, thresholds, n_ans, n_err, p, rejected)


def _predicted_p_values(conf: FloatArray, correct: FloatArray, thresholds: FloatArray,
                        n_test: int, alpha: float) -> FloatArray:
    """The p-value each threshold would get on ``n_test`` items if the testing part
    looked like the grid split: :math:`P(\\mathrm{Bin}(\\hat n, \alpha) \\le \\hat k)` with
    :math:`\\hat n = n_{test} \\hat\\pi(\\lambda)`, :math:`\\hat k = \\hat n \\hat R(\\lambda)`,
    extended to real counts by the incomplete beta function."""
    from scipy.special import betainc

    answered = conf[None, :] >= thresholds[:, None]
    share = answered.mean(axis=1)
    n_hat = n_test * share
    errors = (answered * (1.0 - correct)[None, :]).sum(axis=1)
    risk = np.divide(errors, answered.sum(axis=1), out=np.ones(share.size),
                     where=share > 0)
    k_hat = n_hat * risk
    with np.errstate(invalid="ignore"):
        p = betainc(np.maximum(n_hat - k_hat, 1e-12), k_hat + 1.0, 1.0 - alpha)
    return np.where((share > 0) & (risk < 1), p, 1.0)


def _clopper_pearson_upper(k: int, n: int, delta: float) -> float:
    """One-sided upper confidence bound: the ``r`` with ``P(Bin(n, r) <= k) = delta``."""
    from scipy import stats

    return 1.0 if k >= n else float(stats.beta.ppf(1 - delta, k + 1, n - k))


def abstain_run(run: Any, scorer: str, *, alpha: float = 0.1, delta: float = 0.1,
                calibrator: Calibrator | None = None, grader: str | None = None,
                grid_fraction: float = 0.25, n_grid: int = 100, seed: int = 0) -> AbstentionFit:
    """Fit an abstention policy on a graded run (a :class:`~confide.api.Run` or directory).

    With ``calibrator`` the policy thresholds its calibrated probability of
    ``scorer`` (``policy.scorer`` is then ``None``); fit that calibrator on other
    items for the guarantee to hold. Records without a ``scorer`` value are left
    out of the calibration sample (a policy abstains on them); ``coverage`` is
    then taken over all graded records.
    """
    if calibrator is not None and calibrator.scorer != scorer:
        raise InvalidInputError(f"the calibrator is for scorer {calibrator.scorer!r}, not "
                                f"{scorer!r}", field="calibrator")
    col = run_column(run, scorer, grader)
    conf = col.confidence if calibrator is None else calibrator.predict(col.confidence)
    fit = fit_abstention(conf, col.correct, alpha=alpha, delta=delta,
                         grid_fraction=grid_fraction, n_grid=n_grid, seed=seed,
                         scorer=scorer if calibrator is None else None)
    policy = fit.policy
    policy.calibrator_scorer = None if calibrator is None else calibrator.scorer
    policy.grader, policy.source = col.grader, col.source
    if col.n_missing:
        total = conf.size + col.n_missing
        policy.coverage = policy.coverage * conf.size / total
        policy.extra["n_without_confidence"] = col.n_missing
    return fit
