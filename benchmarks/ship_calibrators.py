"""Fit the calibrator shipped for the bundled model, from a stored graded run of it.

For each default scorer of :func:`confide.score` (``DEFAULT_SCORERS``, less ``length``:
a diagnostic baseline, not a confidence) and each ``--methods`` method, fits a
calibrator on the graded records of ``--run`` with
:func:`confide.decisions.calibration.calibrate_run`, which measures it by K-fold
cross-fitting (each item's probability from a calibrator fitted on the other folds:
out-of-fold ECE and Brier score). Ships the one of lowest cross-fitted Brier score as
``src/confide/decisions/calibrators/<model>-<scorer>.json`` (the model's other shipped
files are removed, so :func:`confide.decisions.calibration.shipped_calibrator` finds
one), with its provenance: model, task, prompt style, items, grader, accuracy,
cross-fitted ECE and Brier. ``confide.score(confide.load_model(), ...)`` then returns a
``probability``. Writes every candidate's figures to ``--results``.

The choice is made on the same cross-fitted figures it reports, so the shipped one's
are slightly optimistic (the best of the candidates); the run is the only graded
run of the bundled model.

    .venv/bin/python benchmarks/ship_calibrators.py \\
        --run runs/quality/triviaqa-smollm2-n500-k10
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

from confide.decisions.calibration import SHIPPED_DIR, CalibrationFit, calibrate_run
from confide.decisions.calibration import run_provenance as provenance_of
from confide.pipeline.answering import DEFAULT_SCORERS

ROOT = Path(__file__).resolve().parents[1]
NOT_CONFIDENCES = {"length"}  # a diagnostic baseline (scorers/whitebox.py)


def _relative(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _fit_all(run: Path, methods: list[str], folds: int
             ) -> list[tuple[str, str, CalibrationFit]]:
    fits = []
    for name in DEFAULT_SCORERS:
        if name in NOT_CONFIDENCES:
            continue
        for method in methods:
            fits.append((name, method, calibrate_run(run, name, method=method,
                                                     n_folds=folds)))
    return fits


def _table(fits: list[tuple[str, str, CalibrationFit]], chosen: CalibrationFit) -> list[str]:
    lines = ["| scorer | method | n | missing | accuracy | cross-fitted ECE | cross-fitted "
             "Brier | in-sample ECE | |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, method, fit in sorted(fits, key=lambda f: f[2].crossfit_brier):
        mark = "**shipped**" if fit is chosen else ""
        lines.append(f"| {name} | {method} | {fit.n} | {fit.n_missing} | {fit.accuracy:.3f} | "
                     f"{fit.crossfit_ece:.4f} | {fit.crossfit_brier:.4f} | "
                     f"{fit.insample_ece:.4f} | {mark} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path,
                        default=ROOT / "runs/quality/triviaqa-smollm2-n500-k10")
    parser.add_argument("--model", default="smollm2",
                        help="the bundled model the run must be of")
    parser.add_argument("--methods", default="isotonic,platt")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--out-dir", type=Path, default=SHIPPED_DIR)
    parser.add_argument("--results", type=Path,
                        default=ROOT / "benchmarks/results/shipped_calibrators.md")
    args = parser.parse_args(argv)

    provenance = provenance_of(args.run)
    if provenance["model"] != args.model:
        print(f"{args.run}: a run of model {provenance['model']!r}, not {args.model!r}",
              file=sys.stderr)
        return 2
    fits = _fit_all(args.run, [m.strip() for m in args.methods.split(",") if m.strip()],
                    args.folds)
    name, method, best = min(fits, key=lambda f: f[2].crossfit_brier)
    calibrator = best.calibrator
    calibrator.source = _relative(args.run)  # the run's path in the repository, not this disk
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for old in args.out_dir.glob(f"{args.model}-*.json"):
        old.unlink()
    path = calibrator.save(args.out_dir / f"{args.model}-{name}.json")

    command = "python benchmarks/ship_calibrators.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    constant = best.accuracy * (1 - best.accuracy)
    text = [
        "# Shipped calibrators",
        "",
        f"Written by `benchmarks/ship_calibrators.py` on {dt.date.today().isoformat()}:",
        "",
        "```",
        command.strip(),
        "```",
        "",
        f"Run: `{_relative(args.run)}` (model `{provenance['model']}`, task "
        f"`{provenance['task']}`, prompt style `{provenance['prompt_style']}` with "
        f"{provenance['num_fewshot']} examples, grader `{calibrator.grader}`), read as "
        f"stored: {best.n + best.n_missing} graded records (the run may still be growing).",
        "",
        f"Shipped: `{_relative(path)}`, scorer `{name}`, method `{method}`, fitted on "
        f"n = {best.n} items, accuracy {best.accuracy:.3f}; {args.folds}-fold cross-fitted "
        f"ECE {best.crossfit_ece:.4f} and Brier {best.crossfit_brier:.4f} (a constant "
        f"prediction of the accuracy scores Brier {constant:.4f}).",
        "",
        "Every candidate (default scorers of `confide.score` less `length`), best "
        "cross-fitted Brier first; the shipped one is chosen on these same figures, so "
        "its own are slightly optimistic:",
        "",
        *_table(fits, best),
        "",
        "`confide.score(confide.load_model(), question)` returns this calibrator's "
        "`probability` with its provenance in `calibration`. The bundled model answers "
        "plain questions from a chat prompt, while the run prompted it 5-shot (TriviaQA's "
        "completion format): `calibration[\"warnings\"]` says so on every such answer.",
        "",
    ]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
