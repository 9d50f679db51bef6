"""The HTML report: one self-contained file per run, or a comparison of several runs.

    >>> from confide.report import write_report
    >>> write_report("runs/triviaqa-smollm2-1234abcd")          # doctest: +SKIP
    PosixPath('runs/triviaqa-smollm2-1234abcd/report.html')

The file works offline: CSS, script, charts (inline SVG) and data are inside
it. It shows the summary table with bootstrap intervals and the ``length``
baseline, ROC and risk–coverage curves per scorer, reliability diagrams of
cross-fitted calibrated confidence, the length-bias audit, grader agreement
(when several graders graded the run) and an item explorer. Built from the
stored records only; the model is not loaded.
"""

from confide.report.build import build_report, render_report, write_comparison, write_report

__all__ = ["build_report", "render_report", "write_comparison", "write_report"]
