"""The contract every registered scorer, grader and metric obeys.

Like scikit-learn's common estimator checks, these tests are parametrised over
the registries (``SCORERS``, ``GRADERS``, ``METRICS``), so a newly registered
method is covered without writing a test.

Scorers run on degenerate records built from **real** generations of the
bundled model (fixture ``hf_model``): greedy answers and samples with every
token statistic the ``hf`` backend gives (log-probabilities, entropies,
KL from uniform, top-k alternatives, hidden states), each answer also under three
ensemble members (``Generation.members``: distributions over a four-word vocabulary made
from the answer's own statistics, so a NaN or an empty answer carries into them).
Scorers that ask the model a second question get the same real backend; clustering uses the
``exact`` judge (the default for TriviaQA), the embedding-based scorers the
bundled all-MiniLM-L6-v2 encoder. Needs exercised: every :class:`Need` except
``TRAINING`` (a scorer that must be fitted first cannot be fitted generically;
such a scorer is left out of the parametrisation, not skipped, and has its own tests:
``tests/test_learned.py``, ``tests/test_density.py``). Claim-level scorers obey
their own contract (``tests/claims/test_contract.py``).

Rules checked, for every scorer and every degenerate record:

* the value is a finite number, or NaN with a reason (never an exception,
  never :math:`\\pm\\infty`);
* two calls give the same value; reversing the samples gives the same value
  (not re-run for scorers that only ask the model about the greedy answer:
  each call is a generation on the shared CPU);
* a reasoning reply's trace never stands in for its final answer: a trace with no
  final answer is NaN (the empty answer); a scorer of the answer span gives an answer
  with an empty trace, or with a trace only of the answer, the value of the same
  answer without a trace;
* an empty answer is never read as confident: an empty greedy answer is NaN;
  samples that are all empty never score above identical samples (strictly
  below for scorers that read the samples); an empty sample added to a record
  never raises its confidence; a record whose samples are partly empty (half
  copies of the greedy answer, half empty) scores strictly below the same record
  with those empties replaced by copies of the greedy answer (an empty sample is
  disagreement, never agreement), for every scorer that reads the samples and asks
  no model;
* a multiple-choice record answered with letters (greedy ``A``; samples ``A.``,
  ``(A)``, ``B``, ``B. mall``) is clustered by the option each answer picks, and
  a scorer that reads the samples' texts scores it strictly below the same record
  whose samples all pick A (``A.``, ``(A)``, ``A``, ``A. bank``), as it does the
  record whose other samples are ``The`` and ``.`` (which SQuAD normalisation
  once made one empty answer with ``A``);
* a reasoning reply (record ``traced``: a real generation as the trace of the answer and
  of each sample) gives every scorer that needs a trace a finite value, and a reply
  without a trace NaN with the reason;
* every answer-level scorer declares its readable form (:class:`Readable`): a
  transform, or ``none:`` with the reason; a transform maps every value (a grid from
  :math:`-10^{6}` to :math:`10^{6}` and the scorer's values on the records above) into
  [0, 1], monotone non-decreasing (the confidence order is kept), NaN to NaN, and
  gives the same on an array as one value at a time.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest

from confide.backends.base import GenerationSpec
from confide.core.errors import ConfideError, InvalidInputError
from confide.core.needs import MEMBER_STATISTICS, MODEL_PASSES
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import ExactJudge
from confide.grading import GRADERS, grade
from confide.metrics import METRICS, UndefinedMetricWarning
from confide.scorers import SCORERS, Cost, Need, ScoringContext, run_scorer, scorers_at
from confide.scorers.base import Readable

N_SAMPLES = 4
# claim level: tests/claims; fitted kinds (Need.TRAINING): tests/test_learned.py, test_density.py
SCORER_NAMES = [spec.name for spec in scorers_at("answer") if Need.TRAINING not in spec.needs]


# ----------------------------------------------------------------------- records


def _empty() -> Generation:
    return Generation(text="", token_ids=[], tokens=[],
                      token_logprobs=np.zeros(0, np.float32),
                      token_entropies=np.zeros(0, np.float32),
                      token_kl_uniform=np.zeros(0, np.float32),
                      top_logprobs=np.zeros((0, 5), np.float32), top_tokens=[])


def _first_token(gen: Generation) -> Generation:
    """The answer cut to its first token, every statistic cut alike."""
    return Generation(
        text=gen.tokens[0], token_ids=gen.token_ids[:1], tokens=gen.tokens[:1],
        token_logprobs=gen.token_logprobs[:1], token_entropies=gen.token_entropies[:1],
        token_kl_uniform=gen.token_kl_uniform[:1],
        top_logprobs=None if gen.top_logprobs is None else gen.top_logprobs[:1],
        top_tokens=None if gen.top_tokens is None else gen.top_tokens[:1],
        hidden=gen.hidden)


def _non_finite(gen: Generation) -> Generation:
    """A -inf log-probability, a NaN entropy and an infinite KL at the first token."""
    lp, ent, kl = (np.array(a, dtype=np.float32) for a in
                   (gen.token_logprobs, gen.token_entropies, gen.token_kl_uniform))
    lp[0], ent[0], kl[0] = -np.inf, np.nan, np.inf
    return replace(gen, token_logprobs=lp, token_entropies=ent, token_kl_uniform=kl)


@pytest.fixture(scope="module")
def generations(hf_model):
    """Real greedy answers and samples of the bundled model for a few TriviaQA items."""
    from confide.tasks import load_task

    task = load_task("triviaqa", limit=6)
    spec = GenerationSpec(max_new_tokens=8, stop=("\n",), n_samples=N_SAMPLES,
                          top_k_alternatives=5, hidden_layers=(-1,))
    results = hf_model.generate([task.render(it, chat=True) for it in task.items], spec,
                                list(range(len(task.items))))
    usable = [(it, r) for it, r in zip(task.items, results, strict=True)
              if r.greedy is not None and r.greedy.text.strip() and r.greedy.n_tokens >= 2
              and all(s.text.strip() for s in r.samples)]
    assert len(usable) >= 2, "the bundled model gave too few non-empty answers"
    return usable


LETTER_ITEM = Item("mc", "Where do you keep your savings?\nA. bank\nB. mall\nAnswer:", ["A"],
                   {"choices": ["bank", "mall"]})
LETTERS = {"letters": ["A.", "(A)", "B", "B. mall"],        # two pick A, two pick B
           "letters_agree": ["A.", "(A)", "A", "A. bank"],  # all pick A
           "letters_blank": ["A.", "(A)", "The", "."]}      # two pick A, two pick nothing


def _letters(greedy: Generation, samples: list[Generation], texts: list[str]) -> Record:
    """The multiple-choice record answered ``A`` with these sample texts (statistics real)."""
    return Record(LETTER_ITEM, replace(greedy, text="A"),
                  [replace(s, text=t) for s, t in zip(samples, texts, strict=True)])


def _ensemble(gen: Generation) -> Generation:
    """``gen`` under 3 ensemble members: member m's step t gives the answer's token the
    logit ``(1 + m/4) log p_t`` and three other words ``-H_t``, -2 and -3 (H_t its entropy)."""
    from confide.scorers.ensemble import member_statistics

    lp = np.asarray(gen.token_logprobs, dtype=np.float64)
    ent = np.asarray(gen.token_entropies, dtype=np.float64)
    logits = np.stack([np.stack([(1 + m / 4) * lp, -ent, np.full_like(lp, -2.0),
                                 np.full_like(lp, -3.0)], axis=-1) for m in range(3)])
    with np.errstate(invalid="ignore"):  # the non-finite case: -inf - (-inf) is NaN
        logits -= np.log(np.exp(logits).sum(-1, keepdims=True))
    return replace(gen, members=member_statistics(logits, [0] * len(lp), method="contract"))


def _with_members(record: Record) -> Record:
    return replace(record, greedy=_ensemble(record.greedy),
                   samples=[_ensemble(s) for s in record.samples])


def _records(generations) -> dict[str, Record]:
    out = _plain_records(generations)
    return {case: _with_members(record) for case, record in out.items()}


def _plain_records(generations) -> dict[str, Record]:
    item, result = generations[0]
    greedy, samples = result.greedy, list(result.samples)
    distinct = list(dict.fromkeys(ExactJudge().key(r.greedy.text) for _, r in generations))
    distinct_samples = [next(r.greedy for _, r in generations if ExactJudge().key(r.greedy.text)
                             == key) for key in distinct]
    with_empty = [samples[0], _empty(), *samples[1:]]
    return {
        "real": Record(item, greedy, samples),
        "empty_greedy": Record(item, _empty(), samples),
        "empty_sample": Record(item, greedy, with_empty),
        "all_empty": Record(item, greedy, [_empty() for _ in samples]),
        "one_sample": Record(item, greedy, samples[:1]),
        "identical": Record(item, greedy, [replace(greedy) for _ in samples]),
        # half the samples copies of the greedy answer, half empty: "identical" with
        # the empties in place of copies
        "partly_empty": Record(item, greedy, [replace(greedy) if i % 2 else _empty()
                                              for i in range(len(samples))]),
        "distinct": Record(item, greedy, distinct_samples),
        "one_token": Record(item, _first_token(greedy), [_first_token(s) for s in samples]),
        "non_finite": Record(item, _non_finite(greedy), [_non_finite(samples[0]), *samples[1:]]),
        # a reasoning reply: a real generation as the trace of the answer and of each sample
        "traced": Record(item, replace(greedy, trace=samples[0]),
                         [replace(s, trace=samples[-1 - i]) for i, s in enumerate(samples)]),
        **{case: _letters(greedy, samples, texts) for case, texts in LETTERS.items()},
        # reasoning replies (confide.core.reasoning): the greedy answer is the final answer
        "trace_no_answer": Record(item, replace(_empty(), finish_reason="length",
                                                trace=replace(greedy)), samples),
        "empty_trace": Record(item, replace(greedy, trace=_empty()), samples),
        "trace_of_answer": Record(item, replace(greedy, trace=replace(greedy)), samples),
    }


CASES = ["real", "empty_greedy", "empty_sample", "all_empty", "partly_empty", "one_sample",
         "identical", "distinct", "one_token", "non_finite", "letters", "traced"]


@pytest.fixture(scope="module")
def records(generations):
    out = _records(generations)
    assert len(out["distinct"].samples) >= 2
    return out


@pytest.fixture(scope="module")
def score(hf_model):
    """Score a record with one scorer in a fresh context (no cache shared between calls)."""

    def apply(name: str, record: Record) -> tuple[float, str | None]:
        spec = SCORERS[name]
        ctx = ScoringContext(backend=hf_model, judge=ExactJudge(), seed=0,
                             options={"verbalized_1s_max_new_tokens": 12,
                                      "verbalized_2s_max_new_tokens": 4})
        return run_scorer(spec, record, ctx)

    return apply


@pytest.fixture(scope="module")
def first(score, records):
    """The first call's result per (scorer, case), shared by the checks that only read it."""
    memo: dict[tuple[str, str], tuple[float, str | None]] = {}

    def get(name: str, case: str) -> tuple[float, str | None]:
        if (name, case) not in memo:
            memo[name, case] = score(name, records[case])
        return memo[name, case]

    return get


def _reads_samples(name: str) -> bool:
    # Scorers that ask the model a second question about the greedy answer alone are
    # not re-run on reversed samples: each run is a generation on the shared CPU.
    needs = SCORERS[name].needs
    return Need.SAMPLES in needs or Need.EXTRA_PROMPT not in needs


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-7, abs=1e-9)


# ----------------------------------------------------------------------- scorers


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", SCORER_NAMES)
def test_scorer_gives_a_finite_value_or_nan_with_a_reason(name, case, first):
    value, reason = first(name, case)
    assert isinstance(value, float)
    if math.isnan(value):
        assert isinstance(reason, str) and reason.strip(), f"{name} on {case}: NaN, no reason"
    else:
        assert math.isfinite(value) and reason is None, (name, case, value, reason)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", SCORER_NAMES)
def test_scorer_is_deterministic_and_ignores_sample_order(name, case, records, score, first):
    record = records[case]
    value, why = first(name, case)
    again, why_again = score(name, record)
    assert _same(value, again) and why == why_again, (name, case, value, again)
    if len(record.samples) >= 2 and _reads_samples(name):
        flipped, _ = score(name, replace(record, samples=record.samples[::-1]))
        assert _same(value, flipped), f"{name} on {case}: {value} vs {flipped} reversed"


@pytest.mark.parametrize("name", [n for n in SCORER_NAMES if Need.TRACE in SCORERS[n].needs])
def test_a_trace_scorer_reads_a_real_trace_and_refuses_a_reply_without_one(name, first):
    value, why = first(name, "traced")
    assert why is None and math.isfinite(value), (name, why)
    value, why = first(name, "real")
    assert math.isnan(value) and "no reasoning trace" in why


@pytest.mark.parametrize("name", [n for n in SCORER_NAMES
                                  if SCORERS[n].needs & MEMBER_STATISTICS])
def test_an_ensemble_scorer_reads_the_members_of_a_real_answer(name, first):
    value, why = first(name, "real")
    assert why is None and math.isfinite(value), (name, why)


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_an_empty_greedy_answer_is_never_scored(name, first):
    value, reason = first(name, "empty_greedy")
    assert math.isnan(value) and "empty answer" in reason


TRACE_CASES = ["empty_trace", "trace_of_answer"]


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_a_reasoning_trace_never_stands_in_for_the_final_answer(name, first):
    """A trace with no final answer is never scored (an empty answer: NaN); a scorer of the
    answer span scores an answer with an empty trace, or with a trace that is only the
    answer, as the same answer with no trace; any other gives a value or NaN with a
    reason on them."""
    value, reason = first(name, "trace_no_answer")
    assert math.isnan(value) and "empty answer" in reason, (name, value, reason)
    real, why_real = first(name, "real")
    for case in TRACE_CASES:
        value, why = first(name, case)
        if SCORERS[name].span == "answer":
            assert _same(value, real) and why == why_real, (name, case, value, real)
        else:
            assert math.isfinite(value) or (isinstance(why, str) and why.strip()), (name, case)


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_empty_samples_never_score_above_identical_samples(name, first):
    empty, _ = first(name, "all_empty")
    identical, why = first(name, "identical")
    if math.isnan(empty):
        return
    assert why is None, f"{name}: all-empty samples scored {empty} but identical ones: {why}"
    if Need.SAMPLES in SCORERS[name].needs:
        assert empty < identical, f"{name}: empty samples {empty} >= identical {identical}"
    else:
        assert empty <= identical


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_partly_empty_samples_never_score_at_or_above_agreeing_samples(name, first):
    """2 x "Paris" + 8 empty samples once scored exactly like 10 x "Paris" (issue "Numbers
    that hold under audit", item 2): an empty sample had likelihood 0 and so no mass."""
    partly, _ = first(name, "partly_empty")
    agreeing, why = first(name, "identical")
    if math.isnan(partly):
        return
    assert why is None, f"{name}: partly empty samples scored {partly} but identical: {why}"
    spec = SCORERS[name]
    if Need.SAMPLES in spec.needs and spec.cost is Cost.SAMPLES:
        assert partly < agreeing, (f"{name}: samples half empty scored {partly} >= "
                                   f"the greedy answer's copies {agreeing}")
    elif Need.SAMPLES not in spec.needs:
        assert partly == agreeing  # the same greedy answer, samples unread


@pytest.mark.parametrize("name", SCORER_NAMES)
def test_an_empty_sample_never_raises_confidence(name, first):
    with_empty, _ = first(name, "empty_sample")
    without, _ = first(name, "real")
    if math.isnan(with_empty) or math.isnan(without):
        return
    assert with_empty <= without + 1e-12, f"{name}: {with_empty} with an empty sample > {without}"


def test_letter_answers_cluster_by_the_option_they_pick(records):
    from confide.scorers.features import clusters

    labels = {case: clusters(records[case], ScoringContext(judge=ExactJudge())).tolist()
              for case in LETTERS}
    # greedy first: "A" with "A." and "(A)"; "B" with "B. mall"; "The" and "." alone
    assert labels == {"letters": [0, 0, 0, 1, 1], "letters_agree": [0, 0, 0, 0, 0],
                      "letters_blank": [0, 0, 0, 1, 2]}


# scorers that read the samples and ask no model (a model's answer is not a function of them)
AGREEMENT = [name for name in SCORER_NAMES
             if Need.SAMPLES in SCORERS[name].needs and SCORERS[name].cost is Cost.SAMPLES]


@pytest.mark.parametrize("name", AGREEMENT)
def test_letter_answers_for_two_options_never_agree_like_one(name, first):
    agree, why = first(name, "letters_agree")
    split, _ = first(name, "letters")
    blank, _ = first(name, "letters_blank")
    if math.isnan(agree):
        assert why
        return
    if split == agree == blank:
        return  # reads the samples' statistics, not their texts (the three differ in text only)
    assert split < agree, f"{name}: samples picking A and B scored {split} >= all A {agree}"
    assert blank < agree, f"{name}: samples 'The' and '.' scored {blank} >= all A {agree}"


# ----------------------------------------------------------------------- readable forms

ALL_ANSWER = [spec.name for spec in scorers_at("answer")]  # the fitted kinds included
WITH_READABLE = [n for n in ALL_ANSWER
                 if SCORERS[n].readable is not None and SCORERS[n].readable.exists]
GRID = np.array([-1e6, -1e3, -50.0, -10.0, -3.0, -1.0, -0.5, -0.1, -1e-9, 0.0, 1e-9, 0.1,
                 0.5, 0.9, 1.0, 1.0 + 1e-9, 3.0, 50.0, 1e6])


@pytest.mark.parametrize("name", ALL_ANSWER)
def test_every_answer_scorer_declares_its_readable_form(name):
    readable = SCORERS[name].readable
    assert isinstance(readable, Readable), f"{name}: no readable form declared (readable=)"
    assert readable.formula.strip(), f"{name}: the readable form says nothing"
    if not readable.exists:
        assert readable.formula.startswith("none: ") and len(readable.formula) > 12, name
    if SCORERS[name].probability:
        assert readable.exists, f"{name}: a probability has a readable form, itself"


def _check_transform(name: str, values: np.ndarray) -> None:
    readable = SCORERS[name].readable
    values = np.sort(values[np.isfinite(values)])
    out = np.array([readable(float(v)) for v in values])
    assert np.all((out >= 0.0) & (out <= 1.0)), (name, values[(out < 0) | (out > 1)])
    assert np.all(np.diff(out) >= 0.0), f"{name}: the readable form breaks the order"
    together = np.asarray(readable.transform(values), dtype=np.float64)
    np.testing.assert_allclose(together, out, rtol=0, atol=0, err_msg=name)
    assert math.isnan(readable(math.nan)), f"{name}: NaN must stay NaN"
    assert np.isnan(readable.transform(np.array([math.nan, 0.0])))[0], name


@pytest.mark.parametrize("name", WITH_READABLE)
def test_readable_transform_maps_into_unit_interval_keeping_order_and_nan(name):
    _check_transform(name, GRID)


@pytest.mark.parametrize("name", [n for n in WITH_READABLE if n in SCORER_NAMES])
def test_readable_transform_of_the_scorers_own_values(name, first):
    values = np.array([first(name, case)[0] for case in CASES])
    _check_transform(name, np.concatenate([values, GRID]))


# ----------------------------------------------------------------------- graders

ITEM = Item("c", "Capital of France?", ["Paris", "Ville Lumière"],
            {"choices": ["Paris", "Lyon"], "tools": []})
ANSWERS = {"empty": "", "blank": " \n\t", "unicode": "Ville Lumière 🗼 — パリ",
           "huge": "Paris " * 20_000, "right": "Paris", "wrong": "Lyon"}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
@pytest.mark.parametrize("name", sorted(GRADERS))
def test_grader_value_in_unit_interval_or_clear_error(name, answer, hf_model):
    options = {"backend": hf_model} if GRADERS[name].needs_backend else {}
    if answer == "huge" and GRADERS[name].needs_backend:
        pytest.skip("a 120,000-character prompt to the bundled model needs memory growing "
                    "with the square of its length; not run on the shared machine")
    text = ANSWERS[answer]
    try:
        value = grade(text, ITEM, name, **options)
    except ConfideError as exc:  # a clear, typed error is allowed; a crash is not
        assert str(exc).strip()
        return
    assert 0.0 <= value <= 1.0, (name, answer, value)
    assert grade(text, ITEM, name, **options) == value  # deterministic
    if answer in ("empty", "blank"):
        assert value == 0.0, f"{name} gives an empty answer {value}"


# ----------------------------------------------------------------------- metrics

RNG_CONF = np.random.default_rng(0).uniform(0.05, 0.95, 40)
MIXED = (np.arange(40) % 3 == 0).astype(float)
METRIC_CASES = {
    "all_correct": (RNG_CONF, np.ones(40)),
    "all_wrong": (RNG_CONF, np.zeros(40)),
    "constant_confidence": (np.full(40, 0.7), MIXED),
    "mixed": (RNG_CONF, MIXED),
}


@pytest.mark.parametrize("case", sorted(METRIC_CASES))
@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_is_finite_or_nan_with_a_warning(name, case):
    confidence, correct = METRIC_CASES[case]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = METRICS[name].fn(confidence, correct)
    value = float(value)
    undefined = [w for w in caught if issubclass(w.category, UndefinedMetricWarning)]
    if math.isnan(value):
        assert undefined, f"{name} on {case}: NaN without an UndefinedMetricWarning"
    else:
        assert math.isfinite(value), (name, case, value)
    order = np.random.default_rng(1).permutation(40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        shuffled = float(METRICS[name].fn(confidence[order], correct[order]))
    assert _same(value, shuffled), f"{name} on {case} depends on record order"


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_refuses_nan_confidence_clearly(name):
    confidence = RNG_CONF.copy()
    confidence[3] = np.nan
    with pytest.raises(InvalidInputError, match="confidence"):
        METRICS[name].fn(confidence, MIXED)


def test_need_names_say_their_values():
    """One vocabulary, one spelling: each Need's name is its value in capitals."""
    assert [n.name for n in Need] == [n.value.upper() for n in Need]


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_cost_says_what_the_scorer_spends(name):
    """A scorer that asks the model again costs model calls; one that reads sampled
    answers (and calls no model itself) costs samples; the rest are free or features."""
    spec = SCORERS[name]
    if spec.needs & MODEL_PASSES:
        assert spec.cost is Cost.MODEL_CALLS
    elif Need.SAMPLES in spec.needs:
        assert spec.cost is Cost.SAMPLES
    else:
        assert spec.cost in (Cost.FREE, Cost.FEATURES)
