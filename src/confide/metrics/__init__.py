r"""Evaluation metrics: how well a confidence separates right answers from wrong ones.

Every metric is a pure, vectorised numpy function

    ``fn(confidence, correct, *, nan_policy="raise", **options) -> float``

of two 1-D arrays of equal length: ``confidence`` (higher = more likely
correct; raw scores keep their natural scale) and ``correct`` (binary {0, 1},
or a continuous quality in [0, 1] where the metric defines one). Each public
function validates its input with
:func:`~confide.metrics.core.check_confidence_correct` and its options, then
calls a private ``_helper`` that holds the maths; the bootstrap loops call the
helpers (``METRICS[name].helper``) directly on already validated arrays.

The package is split by kind, around a small public core:

=================================  ==================================================
:mod:`confide.metrics.core`        registry, validation, shared numeric helpers
:mod:`confide.metrics.ranking`     AUROC, AUPRC, Spearman, rank-calibration error
:mod:`confide.metrics.selective`   accuracy, PRR, AURC, risk/coverage trade-offs
:mod:`confide.metrics.calibration` ECE family, Brier, NLL, BAS, reliability diagram
:mod:`confide.metrics.crossfit`    the calibration core: calibrators, one fold rule
:mod:`confide.metrics.bootstrap`   bootstrap and paired bootstrap intervals
=================================  ==================================================

Names show the direction, as in scikit-learn: ``*_score`` is higher-better,
``*_error``/``*_loss``/``risk_*`` lower-better. The registry
:data:`METRICS` lists every metric with its direction and kind:

============================  ===========  =========  ====================================
registry name                 kind         direction  function
============================  ===========  =========  ====================================
``accuracy``                  summary      higher     :func:`accuracy_score`
``auroc``                     ranking      higher     :func:`auroc_score`
``auprc_correct``             ranking      higher     :func:`auprc_correct_score`
``auprc_error``               ranking      higher     :func:`auprc_error_score`
``spearman``                  ranking      higher     :func:`spearman_score`
``rank_calibration_error``    ranking      lower      :func:`rank_calibration_error`
``prr``                       selective    higher     :func:`prr_score`
``aurc``                      selective    lower      :func:`aurc_loss`
``eaurc``                     selective    lower      :func:`eaurc_loss`
``risk_at_coverage``          selective    lower      :func:`risk_at_coverage`
``coverage_at_risk``          selective    higher     :func:`coverage_at_risk_score`
``ece``                       calibration  lower      :func:`calibration_error`
``ece_mass``                  calibration  lower      :func:`mass_calibration_error`
``ace``                       calibration  lower      :func:`adaptive_calibration_error`
``brier``                     calibration  lower      :func:`brier_loss`
``nll``                       calibration  lower      :func:`nll_loss`
``bas``                       calibration  higher     :func:`bas_score`
============================  ===========  =========  ====================================

Undefined results (one class only, constant input) emit
:class:`UndefinedMetricWarning` and return NaN. A NaN confidence raises
:class:`~confide.core.errors.InvalidInputError` unless ``nan_policy="omit"``, which
drops the row and logs how many were dropped; NaN is never read as "confident".

Ties in confidence: AUROC counts a tied pair as 1/2; PRR, AURC, E-AURC,
risk at coverage and accuracy at fractions give the exact expectation over all
orders of the tied items (each tied item's quality is replaced by its tie
group's mean); AUPRC treats a tie group as one threshold (as scikit-learn);
binned metrics keep tied values in one bin. No result depends on record order.

Also here: :func:`accuracy_at_fractions` and :func:`risk_coverage_curve`
(tables and curves, not single numbers), :func:`reliability_diagram`,
:func:`crossfit_probabilities` (K-fold calibration of raw scores, for the
calibration metrics), :func:`bootstrap_interval` and :func:`paired_bootstrap`.

Metrics take arrays, never records: this package imports nothing of confide
but :mod:`confide.core.errors`, :mod:`confide.core.registry` and
:mod:`confide.core.jsonsafe` (``tests/test_layers.py`` checks that it imports no later
stage). The calibration error of the ``agreement`` scorer over records is
:func:`confide.evaluation.semantic_calibration.semantic_calibration_error`.
"""

from __future__ import annotations

from confide.metrics.bootstrap import BootstrapInterval, bootstrap_interval, paired_bootstrap
from confide.metrics.calibration import (
    ReliabilityDiagram,
    adaptive_calibration_error,
    bas_score,
    brier_loss,
    calibration_error,
    mass_calibration_error,
    nll_loss,
    reliability_diagram,
)
from confide.metrics.core import METRICS, MetricSpec, UndefinedMetricWarning, metric
from confide.metrics.crossfit import (
    CALIBRATION_METHODS,
    apply_calibration,
    crossfit_folds,
    crossfit_probabilities,
    crossfit_splits,
    fit_calibration,
)
from confide.metrics.ranking import (
    auprc_correct_score,
    auprc_error_score,
    auroc_score,
    rank_calibration_error,
    spearman_score,
)
from confide.metrics.selective import (
    accuracy_at_fractions,
    accuracy_score,
    aurc_loss,
    coverage_at_risk_score,
    eaurc_loss,
    prr_score,
    risk_at_coverage,
    risk_coverage_curve,
)

__all__ = [
    "CALIBRATION_METHODS",
    "METRICS",
    "BootstrapInterval",
    "MetricSpec",
    "ReliabilityDiagram",
    "UndefinedMetricWarning",
    "accuracy_at_fractions",
    "accuracy_score",
    "adaptive_calibration_error",
    "apply_calibration",
    "auprc_correct_score",
    "auprc_error_score",
    "auroc_score",
    "aurc_loss",
    "bas_score",
    "bootstrap_interval",
    "brier_loss",
    "calibration_error",
    "coverage_at_risk_score",
    "crossfit_folds",
    "crossfit_probabilities",
    "crossfit_splits",
    "eaurc_loss",
    "fit_calibration",
    "mass_calibration_error",
    "metric",
    "nll_loss",
    "paired_bootstrap",
    "prr_score",
    "rank_calibration_error",
    "reliability_diagram",
    "risk_at_coverage",
    "risk_coverage_curve",
    "spearman_score",
]
