"""The contract every registered claim scorer obeys (as tests/test_contract.py for scorers).

Parametrised over the claim-level scorers of :data:`~confide.scorers.SCORERS`, so a
new claim scorer is covered without writing a test. Records come from real long answers of the
bundled model (greedy and samples with every token statistic of ``hf``), the
scorers asking the model get the same real backend and the claim scorers
reading the samples the ``exact`` judge. For every scorer and every case:

* one entry per claim, each a finite number or NaN with a reason (never an
  exception, never :math:`\\pm\\infty`);
* two calls agree, and reversing the samples changes nothing;
* a claim covering no token, and a non-finite statistic, give NaN with a reason
  for the scorers reading token statistics; an empty answer has no claims;
* empty samples never support a claim more than identical samples do (strictly
  less for scorers reading the samples).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from confide.backends.base import GenerationSpec
from confide.core.records import Generation, Record
from confide.equivalence.judges import ExactJudge
from confide.scorers import SCORERS, Need, ScoringContext, run_scorer, scorers_at
from confide.scorers.claim_split import split_claims

NAMES = [spec.name for spec in scorers_at("claim")]
CASES = ["real", "identical", "all_empty", "no_tokens", "non_finite"]


@pytest.fixture(scope="module")
def long_answer(hf_model):
    from confide.core.records import Item

    # The first question whose answer splits into two claims: which one does depends on
    # the decoding dtype (bfloat16 answers the first in one long sentence).
    spec = GenerationSpec(max_new_tokens=40, stop=("\n\n",), n_samples=3,
                          top_k_alternatives=5)
    texts = []
    for question in ("Describe Paris in two short sentences.",
                     "Tell me two facts about the Moon."):
        item = Item("paris", question)
        result = hf_model.generate([[{"role": "user", "content": question}]], spec, [7])[0]
        if len(split_claims(result.greedy)) >= 2:
            return item, result
        texts.append(result.greedy.text)
    raise AssertionError(f"no answer split into two claims: {texts}")


def _with_claims(record: Record) -> Record:
    record.claims = split_claims(record.greedy)
    return record


@pytest.fixture(scope="module")
def records(long_answer):
    item, result = long_answer
    greedy = result.greedy
    first = split_claims(greedy)[0].tokens[0]  # the first claim's first token (after "1. ")
    lp = np.array(greedy.token_logprobs, dtype=np.float32)
    lp[first] = -np.inf
    ent = np.array(greedy.token_entropies, dtype=np.float32)
    ent[first] = np.nan
    kl = np.array(greedy.token_kl_uniform, dtype=np.float32)
    kl[first] = np.inf
    no_tokens = _with_claims(Record(item, greedy, list(result.samples)))
    no_tokens.claims[0].tokens = []
    empty = Generation(text="", token_ids=[], tokens=[], token_logprobs=np.zeros(0),
                       token_entropies=np.zeros(0), token_kl_uniform=np.zeros(0))
    return {
        "real": _with_claims(Record(item, greedy, list(result.samples))),
        "identical": _with_claims(Record(item, greedy, [replace(greedy) for _ in range(3)])),
        "all_empty": _with_claims(Record(item, greedy, [replace(empty) for _ in range(3)])),
        "no_tokens": no_tokens,
        "non_finite": _with_claims(Record(item, replace(greedy, token_logprobs=lp,
                                                        token_entropies=ent,
                                                        token_kl_uniform=kl),
                                          list(result.samples))),
    }


@pytest.fixture(scope="module")
def score(hf_model):
    memo: dict[tuple[str, str], list[tuple[float, str | None]]] = {}

    def apply(name: str, record: Record, key: str | None = None):
        if key is not None and (name, key) in memo:
            return memo[name, key]
        ctx = ScoringContext(backend=hf_model, judge=ExactJudge(), seed=0)
        out = run_scorer(SCORERS[name], record, ctx, claims=record.claims)
        if key is not None:
            memo[name, key] = out
        return out

    return apply


def _reads_tokens(name: str) -> bool:
    return bool(SCORERS[name].needs & {Need.TOKEN_LOGPROBS, Need.TOKEN_ENTROPIES,
                                             Need.TOKEN_KL_UNIFORM})


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", NAMES)
def test_claim_scorer_gives_one_finite_value_or_nan_with_a_reason_per_claim(
        name, case, records, score):
    record = records[case]
    out = score(name, record, case)
    assert len(out) == len(record.claims)
    for value, reason in out:
        assert isinstance(value, float)
        if math.isnan(value):
            assert isinstance(reason, str) and reason.strip(), (name, case)
        else:
            assert math.isfinite(value) and reason is None, (name, case, value, reason)


@pytest.mark.parametrize("name", NAMES)
def test_claim_scorer_is_deterministic_and_ignores_sample_order(name, records, score):
    record = records["real"]
    first = score(name, record, "real")
    again = score(name, record)
    flipped = score(name, replace(record, samples=record.samples[::-1]))
    for (a, why), (b, why_b), (c, _) in zip(first, again, flipped):
        assert (math.isnan(a) and math.isnan(b) and why == why_b) or a == pytest.approx(b)
        assert (math.isnan(a) and math.isnan(c)) or a == pytest.approx(c)


@pytest.mark.parametrize("name", NAMES)
def test_claims_without_tokens_or_with_non_finite_statistics_are_nan(name, records, score):
    if not _reads_tokens(name):
        pytest.skip(f"{name} does not read token statistics")
    value, reason = score(name, records["no_tokens"], "no_tokens")[0]
    assert math.isnan(value) and "token" in reason
    value, reason = score(name, records["non_finite"], "non_finite")[0]
    assert math.isnan(value) and reason


@pytest.mark.parametrize("name", NAMES)
def test_empty_samples_never_support_more_than_identical_samples(name, records, score):
    empty = score(name, records["all_empty"], "all_empty")
    identical = score(name, records["identical"], "identical")
    for (e, _), (i, _) in zip(empty, identical):
        if math.isnan(e):
            continue
        if Need.SAMPLES in SCORERS[name].needs:
            assert e < i, (name, e, i)
        else:
            assert e <= i + 1e-12


@pytest.mark.parametrize("name", NAMES)
def test_an_empty_answer_has_no_claims_to_score(name, long_answer, score):
    item, result = long_answer
    record = _with_claims(Record(item, Generation(text=" "), list(result.samples)))
    assert record.claims == [] and score(name, record) == []


@pytest.mark.parametrize("name", NAMES)
def test_claim_scorer_has_formula_and_reference(name):
    doc = SCORERS[name].fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc
