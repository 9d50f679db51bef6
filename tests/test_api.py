"""The public Python API on the bundled model."""

from __future__ import annotations

import math

import pytest

import confide
from confide.core.errors import InvalidInputError
from confide.pipeline.plan import DEFAULT_SCORERS


def test_score_answers_with_confidences(hf_model):
    answers = confide.score(hf_model, ["What is the capital of France?", "Who wrote Hamlet?"],
                            max_new_tokens=12)
    assert len(answers) == 2
    for a in answers:
        assert a.answer
        assert set(a.confidences) == set(DEFAULT_SCORERS)
        assert all(not math.isnan(v) for v in a.confidences.values())
        assert a.confidences["msp"] <= a.confidences["mean_logprob"] <= 0


def test_score_rejects_empty_question(hf_model):
    with pytest.raises(InvalidInputError, match="q1"):
        confide.score(hf_model, ["Who wrote Hamlet?", "  "])


def test_public_names_are_exported_and_sorted():
    assert confide.__all__ == sorted(confide.__all__)
    for name in confide.__all__:
        assert getattr(confide, name) is not None


def test_one_list_of_public_names():
    # confide.api.__all__ is the list; confide reads it from api.py's source (no import),
    # so the reading must give the list the module holds.
    import confide.api

    assert confide.api.__all__ == sorted(confide.api.__all__)
    assert confide._api_names() == tuple(confide.api.__all__)
    assert set(confide.__all__) == {*confide.api.__all__, "__version__"}
    assert set(confide.__all__) <= set(dir(confide))
    for name in confide.api.__all__:
        assert getattr(confide, name) is getattr(confide.api, name), name


def test_dir_and_public_names_stay_light():
    import subprocess
    import sys

    code = ("import sys, confide; names = dir(confide), confide.__all__; "
            "from confide import ConfideError; confide.InvalidInputError; "
            "print('confide.api' in sys.modules, 'torch' in sys.modules, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


def test_the_api_imports_no_dataframe_stack():
    # The first confide.score call imports confide.api: scikit-learn (with the pandas and
    # pyarrow it drags in) is imported only by the few functions that use it.
    import subprocess
    import sys

    code = ("import sys, confide.api; "
            "print([m for m in ('sklearn', 'pandas', 'pyarrow', 'rich', 'torch') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_former_names_still_work():
    assert confide.evaluate is confide.generate_and_evaluate
    assert confide.Run.evaluate is confide.Run.compute_table


def test_api_and_cli_default_to_the_same_run():
    import inspect

    from confide.cli.making import run
    from confide.core.options import DEFAULT_LIMIT

    cli = inspect.signature(run).parameters
    config = confide.RunConfig()
    assert config.limit == cli["limit"].default == DEFAULT_LIMIT
    assert config.model == cli["model"].default
    assert config.task == cli["task"].default
    assert config.batch_size == cli["batch_size"].default
    assert (config.temperature, config.top_p) == (cli["temperature"].default,
                                                  cli["top_p"].default)
    api = inspect.signature(confide.generate_and_evaluate).parameters
    assert api["task"].default == config.task


def test_limit_zero_means_every_item_in_the_api_as_in_the_cli():
    from dataclasses import replace

    from confide.core.options import DEFAULT_LIMIT

    config = confide.RunConfig(limit=0)
    assert config.limit is None  # stored as None: --limit 0 and limit=None are one run
    assert confide.default_run_dir(config) == confide.default_run_dir(replace(config,
                                                                              limit=None))
    every = confide.prepare(config).task.items
    assert len(every) > DEFAULT_LIMIT
    assert len(confide.prepare(confide.RunConfig()).task.items) == DEFAULT_LIMIT
    with pytest.raises(InvalidInputError, match="positive"):
        confide.RunConfig(limit=-3)


def test_every_sampling_scorer_asks_the_one_default_number_of_samples():
    from confide.core.options import DEFAULT_SAMPLES
    from confide.pipeline.plan import sample_count
    from confide.scorers import SCORERS, Need

    # the families built on sampled answers (asking.py's bsdetector and p_true_sampling
    # ask 5 of their own; claim_support is claim-level)
    families = {"sampling", "semantic", "relevance", "consistency"}
    asked = {spec.name: spec.n_samples for spec in SCORERS.values()
             if spec.family in families and Need.SAMPLES in spec.needs}
    assert asked and set(asked.values()) == {DEFAULT_SAMPLES}, asked
    assert sample_count(["msp", "semantic_entropy"]) == DEFAULT_SAMPLES
    assert confide.samples_needed(["semantic_entropy", "no_such_scorer"]) == DEFAULT_SAMPLES


def test_one_question_is_one_answer_and_one_scorer_name_is_one_scorer(hf_model):
    """A string is a question, not its characters; "msp" is a scorer, not m, s and p."""
    from confide.pipeline.plan import question_plan

    plan = question_plan("Hi?", scorers="msp, mean_logprob", max_new_tokens=4)
    assert [it.question for it in plan.task.items] == ["Hi?"]
    assert plan.scorers == ("msp", "mean_logprob")
    answer = confide.score(hf_model, "What is the capital of France?", scorers="msp",
                           max_new_tokens=4)
    assert isinstance(answer, confide.ScoredAnswer)
    assert answer.question == "What is the capital of France?" and answer.answer
    assert set(answer.confidences) == {"msp"} and math.isfinite(answer.confidences["msp"])
    listed = confide.score(hf_model, ["What is the capital of France?"], scorers=["msp"],
                           max_new_tokens=4)
    assert len(listed) == 1 and listed[0].confidences == answer.confidences
