"""Semantic scorers: exact entropy and graph values on sample sets with known clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from confide.core.errors import InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import AstJudge, Decision, ExactJudge, Judge
from confide.evaluation.semantic_calibration import semantic_calibration_error
from confide.scorers import SCORERS, ScoringContext, run_scorer
from confide.scorers import relevance as rel
from confide.scorers import semantic as sem
from confide.scorers.relevance import meaningful_spans

SEMANTIC = ["agreement", "num_sets", "semantic_entropy", "semantic_entropy_weighted", "eigv",
            "degree", "eccentricity", "kernel_language_entropy", "sar", "token_sar", "cocoa"]


def gen(text: str, logprobs=(-0.5,), tokens=None) -> Generation:
    lp = np.asarray(logprobs, dtype=np.float32)
    return Generation(text=text, token_ids=list(range(lp.size)),
                      tokens=list(tokens) if tokens is not None else [text] * lp.size,
                      token_logprobs=lp)


def record(samples, greedy=None, item_id="q", **metadata) -> Record:
    return Record(item=Item(item_id, "What is the capital of France?", ["Paris"], metadata),
                  greedy=greedy or gen("Paris", [-0.5, -0.3]), samples=samples)


# Clusters of the samples under the exact judge: {Paris, paris., Paris}, {Lyon}, {Marseille};
# the greedy answer "Paris" is placed in the first
SAMPLES = [gen("Paris", [-0.1]), gen("paris.", [-0.2, -0.4]), gen("Lyon", [-1.0]),
           gen("Paris", [-0.1]), gen("Marseille", [-2.0])]


def score(name: str, r: Record, judge: Judge | None = None) -> float:
    value, reason = run_scorer(SCORERS[name], r, ScoringContext(judge=judge or ExactJudge()))
    assert reason is None, reason
    return value


def test_agreement_is_the_greedy_cluster_frequency():
    assert score("agreement", record(SAMPLES)) == pytest.approx(3 / 5)


def test_num_sets_counts_sample_clusters():
    assert score("num_sets", record(SAMPLES)) == -3.0


def test_semantic_entropy_from_frequencies():
    expected = 0.6 * math.log(0.6) + 2 * 0.2 * math.log(0.2)  # = -0.950270...
    assert score("semantic_entropy", record(SAMPLES)) == pytest.approx(expected)
    assert expected == pytest.approx(-0.9502705392)


def test_semantic_entropy_weighted_sums_over_all_samples():
    # every sample counts, repeats included: Paris 2 x e^-0.1 + e^-0.3, Lyon e^-1, Marseille e^-2
    mass = np.array([2 * math.exp(-0.1) + math.exp(-0.3), math.exp(-1.0), math.exp(-2.0)])
    p = mass / mass.sum()
    assert score("semantic_entropy_weighted", record(SAMPLES)) == pytest.approx(
        float((p * np.log(p)).sum()))


@pytest.mark.parametrize(("n_paris", "expected"), [(9, -0.242), (5, -0.667), (1, -0.422)])
def test_semantic_entropy_weighted_follows_sampling_frequency(n_paris, expected):
    # issue 12: de-duplicated texts gave -0.667 for all three; Farquhar et al. 2024 and
    # LM-Polygraph sum over all samples
    samples = [gen("Paris", [-0.1])] * n_paris + [gen("Lyon", [-0.56])] * (10 - n_paris)
    assert score("semantic_entropy_weighted", record(samples)) == pytest.approx(expected,
                                                                                abs=5e-4)


def test_empty_samples_never_read_as_certain():
    empty = gen("", [])
    # the weighted SE gives an empty sample a cluster of its own and the mean normalised
    # log-likelihood of the other samples: one answer and two empty samples are three
    # clusters of equal mass, the least confident value
    assert score("semantic_entropy_weighted",
                 record([gen("Paris", [-0.1]), empty, empty])) == pytest.approx(-math.log(3))
    # ... never the certainty of the answer alone, nor an empty sample's former
    # probability 1: it weighs as a typical sample, exp(mean(-0.1, -0.1, -0.5))
    mixed = record([gen("Paris", [-0.1]), gen("Paris", [-0.1]), gen("Lyon", [-0.5]), empty])
    mass = np.array([2 * math.exp(-0.1), math.exp(-0.5), math.exp(-0.7 / 3)])
    p = mass / mass.sum()
    assert score("semantic_entropy_weighted", mixed) == pytest.approx(float((p * np.log(p)).sum()))
    assert score("semantic_entropy_weighted", mixed) < score("semantic_entropy_weighted",
                                                             record(mixed.samples[:3]))
    # all samples empty: each its own cluster, the least confident values
    blank = record([empty, gen("  ", [-0.3]), empty])
    assert score("semantic_entropy", blank) == pytest.approx(-math.log(3))
    assert score("num_sets", blank) == -3.0
    assert score("agreement", blank) == 0.0
    assert score("degree", blank) == pytest.approx(3 / 9 - 1)
    assert score("kernel_language_entropy", blank) == pytest.approx(-math.log(3))
    # the greedy answer empty too: no scorer has anything to put a confidence on
    nothing = record([empty, empty, empty], greedy=gen("", []))
    for name in ["agreement", "semantic_entropy", "num_sets", "cocoa", "eigv"]:
        value, reason = run_scorer(SCORERS[name], nothing, ScoringContext())
        assert math.isnan(value) and "empty answer" in reason, name


def test_cocoa_refuses_non_finite_greedy_likelihood():
    r = record(SAMPLES, greedy=gen("Paris", [-math.inf]))
    value, reason = run_scorer(SCORERS["cocoa"], r, ScoringContext())
    assert math.isnan(value) and "finite" in reason


@pytest.mark.parametrize("name", ["agreement", "num_sets", "semantic_entropy",
                                  "semantic_entropy_weighted"])
def test_one_sample_is_refused_not_certain(name):
    value, reason = run_scorer(SCORERS[name], record([gen("Paris", [-0.1])]), ScoringContext())
    assert math.isnan(value) and "at least 2 sampled answer" in reason


def test_pair_judge_clusters_the_samples_alone():
    # issue 12: identical samples gave SE 0 or 0.693 depending on the greedy text. A judge
    # that links "mid" to both ends but not the ends to each other shows it: with the
    # greedy answer clustered first ("mid"), both samples joined its cluster.
    class Bridge(Judge):
        name = "bridge"

        def _judge(self, pairs, item):
            return [Decision("mid" in (a, b), 0.5 if "mid" in (a, b) else 0.0) for a, b in pairs]

    for greedy in ("mid", "left", "other"):
        r = record([gen("left"), gen("right")], greedy=gen(greedy))
        assert score("semantic_entropy", r, Bridge()) == pytest.approx(-math.log(2)), greedy
        assert score("num_sets", r, Bridge()) == -2.0
    # the greedy answer is placed among the samples' clusters: "mid" joins the first
    assert score("agreement", record([gen("left"), gen("right")], greedy=gen("mid")),
                 Bridge()) == 0.5


def test_graph_scorers_with_binary_affinity():
    r = record(SAMPLES)
    # 0/1 affinity, clusters of sizes 3, 1, 1: normalised-Laplacian eigenvalues 0,0,0,1,1
    assert score("eigv", r) == pytest.approx(-3.0)
    # (sum of W) / k^2 - 1 = (9 + 1 + 1) / 25 - 1
    assert score("degree", r) == pytest.approx(-0.56)
    # spectral embedding rows e_c / sqrt(|c|): spread sqrt(m - 1)
    assert score("eccentricity", r) == pytest.approx(-math.sqrt(2))
    assert score("kernel_language_entropy", r) == pytest.approx(_kle_of_blocks([3, 1, 1]))


def _kle_of_blocks(sizes, t=sem.KLE_TIME):
    # Hand-derived: a block of m equivalent samples has L = mI - J, so e^{-tL} =
    # J/m + e^{-tm}(I - J/m); unit diagonal gives off-diagonal r = (1 - e^{-tm}) /
    # (1 + (m-1) e^{-tm}) and eigenvalues 1 + (m-1) r (once) and 1 - r (m-1 times),
    # all divided by k (Nikitin et al.'s normalisation).
    k = sum(sizes)
    mu = []
    for m in sizes:
        e = math.exp(-t * m)
        r = (1 - e) / (1 + (m - 1) * e)
        mu += [(1 + (m - 1) * r) / k] + [(1 - r) / k] * (m - 1)
    return sum(x * math.log(x) for x in mu if x > 0)


def test_kernel_language_entropy_of_equivalent_samples():
    # one block of 4: r = (1 - e^-1.2) / (1 + 3 e^-1.2); less uncertain than 4 unrelated
    value = score("kernel_language_entropy", record([gen("Paris")] * 4))
    assert value == pytest.approx(_kle_of_blocks([4]))
    assert -math.log(4) < value < 0


def test_kernel_language_entropy_of_unrelated_samples_is_log_k():
    r = record([gen("a"), gen("b"), gen("c")])
    assert score("kernel_language_entropy", r) == pytest.approx(-math.log(3))


class FixedJudge(Judge):
    """Test fake: one fixed affinity for every pair of distinct answers."""

    name = "fixed"

    def __init__(self, w: float) -> None:
        super().__init__()
        self.w = w

    def _judge(self, pairs, item):
        return [Decision(self.w >= 0.5, self.w) for _ in pairs]


def test_graph_scorers_with_fractional_affinity():
    # two samples, W = [[1, a], [a, 1]], a = 0.5
    r = record([gen("x"), gen("y")])
    judge = FixedJudge(0.5)
    # normalised Laplacian eigenvalues 0 and 2a/(1+a) = 2/3 → -(1 + 1/3)
    assert score("eigv", r, judge) == pytest.approx(-4 / 3)
    assert score("degree", r, judge) == pytest.approx(3 / 4 - 1)
    # both eigenvalues < 0.9: rows of an orthogonal 2x2 matrix, centred spread 1
    assert score("eccentricity", r, judge) == pytest.approx(-1.0)
    # e^{-tL} with L eigenvalues 0, 2a: unit diagonal gives off-diagonal tanh(t a), so
    # K = [[1, r], [r, 1]] / 2 has eigenvalues (1 ± r) / 2 (Nikitin et al.)
    rho = math.tanh(sem.KLE_TIME * 0.5)
    mu = np.array([(1 + rho) / 2, (1 - rho) / 2])
    assert score("kernel_language_entropy", r, judge) == pytest.approx(
        float((mu * np.log(mu)).sum()))


def test_cocoa_hand_computed():
    # u = -log P(y*) = 0.8; greedy agrees with 3 of 5 samples → mean(1 - W) = 0.4
    assert score("cocoa", record(SAMPLES)) == pytest.approx(-0.32, abs=1e-6)


def test_cocoa_with_fractional_affinity():
    r = record([gen("x"), gen("y")])
    assert score("cocoa", r, FixedJudge(0.25)) == pytest.approx(-0.8 * 0.75, abs=1e-6)


def test_token_sar_single_token_is_its_log_probability():
    r = record([], greedy=gen("Paris", [-0.7]))
    assert score("token_sar", r) == pytest.approx(-0.7, abs=1e-6)


def test_token_sar_matches_its_formula():
    from confide.grading import embed_texts

    tokens, lp = ["The", " capital", " is", " Paris"], np.array([-0.2, -1.0, -0.1, -2.0])
    r = record([], greedy=gen("The capital is Paris", lp, tokens))
    q = "What is the capital of France?"
    e = embed_texts([f"{q} The capital is Paris"] + [
        f"{q} {''.join(tokens[:i] + tokens[i + 1:]).strip()}" for i in range(4)])
    rel = np.clip(1 - e[1:] @ e[0], 0, None)
    expected = float((rel / rel.sum() * lp).sum())
    value = score("token_sar", r)
    assert value == pytest.approx(expected, rel=1e-5)
    assert lp.min() <= value <= lp.max()


def test_long_answer_relevance_is_taken_within_its_sentence():
    # past RELEVANCE_WINDOW tokens a unit's removal is measured against its own sentence:
    # the hand-computed value embeds only that sentence (with the question)
    from confide.grading import embed_texts

    q = "What is the capital of France?"
    first = ["The", " capital", " of", " France", " is", " Paris", "."]
    filler = [" It", " has", " many", " old", " bridges", "."]
    tokens = first + filler * ((rel.RELEVANCE_WINDOW // len(filler)) + 1)
    units = [[i] for i in range(len(tokens))]
    relevance = rel.removal_relevance(q, tokens, units)
    e = embed_texts([f"{q} {''.join(first).strip()}"] + [
        f"{q} {''.join(first[:i] + first[i + 1:]).strip()}" for i in range(len(first))])
    assert relevance[:len(first)] == pytest.approx(np.clip(1 - e[1:] @ e[0], 0, None),
                                                   abs=1e-6)
    spans = rel.relevance_spans(tokens, units, rel.RELEVANCE_WINDOW)
    assert spans[0] == list(range(len(first))) and all(len(s) <= len(filler) for s in spans[1:])
    # a short answer is one span: exactly the papers' whole-answer removal
    short = rel.removal_relevance(q, first, [[i] for i in range(len(first))])
    assert short == pytest.approx(rel.removal_relevance(q, first, [[i] for i in range(len(first))],
                                                        window=None), abs=0)


def test_relevance_reaches_tokens_past_the_encoders_limit():
    # the encoder reads 256 word pieces: with the whole answer, a token past them moves
    # nothing (relevance 0 up to padding noise); within its sentence it counts
    q = "Name a number."
    tokens = [" one", " two", " three", "."] * 90 + [" Paris", "."]
    units = [[i] for i in range(len(tokens))]
    assert rel.removal_relevance(q, tokens, units, window=None)[-2] < 1e-6
    assert rel.removal_relevance(q, tokens, units)[-2] > 0.01


def test_sar_identical_samples_hand_computed():
    # each sample one token (TokenSAR = -log p), identical texts (R_S = 1):
    # SentSAR = -log(p + p / t), c = log(p (1 + 1/t)) with p = e^-0.5, t = 1e-3
    r = record([gen("Paris", [-0.5]), gen("Paris", [-0.5])])
    assert score("sar", r) == pytest.approx(-0.5 + math.log(1 + 1 / rel.SAR_TEMPERATURE),
                                            abs=1e-4)


def test_semantic_scorers_need_samples():
    for name in ["agreement", "num_sets", "semantic_entropy", "eigv", "sar", "cocoa"]:
        value, reason = run_scorer(SCORERS[name], record([]), ScoringContext())
        assert math.isnan(value) and "sampled answer" in reason, name


def test_context_without_judge_uses_exact():
    ctx = ScoringContext()
    value, _ = run_scorer(SCORERS["agreement"], record(SAMPLES), ctx)
    assert value == pytest.approx(0.6) and ctx.judge.name == "exact"


def test_cache_never_changes_results():
    records = [record(SAMPLES, item_id="a"),
               record([gen("x"), gen("y"), gen("x")], item_id="b"),
               record([gen("Lyon"), gen("Lyon")], greedy=gen("Lyon", [-1.0]), item_id="c")]
    names = [n for n in SEMANTIC if n not in ("sar", "token_sar")]  # embeddings tested above
    shared = ScoringContext(judge=FixedJudge(0.6))
    warm = {(r.item.id, n): run_scorer(SCORERS[n], r, shared)[0] for r in records for n in names}
    again = {(r.item.id, n): run_scorer(SCORERS[n], r, shared)[0]
             for r in records[::-1] for n in names[::-1]}
    cold = {(r.item.id, n): run_scorer(SCORERS[n], r, ScoringContext(judge=FixedJudge(0.6)))[0]
            for r in records for n in names}
    assert warm == again == cold
    # the shared judge judged each record's unique pairs once: 4, 3 and 1 unique answers
    assert shared.judge.calls == 6 + 3 + 0


def test_semantic_entropy_with_ast_judge_on_function_calls():
    tools = [{"name": "area", "parameters": {"properties": {
        "r": {"type": "float"}, "unit": {"type": "string", "default": "cm"}}}}]
    r = record([gen('[{"name": "area", "arguments": {"r": 2}}]'), gen('area(r=2.0, unit="cm")'),
                gen("area(r=3)"), gen('area(unit="CM", r=2)')],
               greedy=gen("area(r=2)"), tools=tools)
    assert score("semantic_entropy", r, AstJudge()) == pytest.approx(
        0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert score("agreement", r, AstJudge()) == pytest.approx(0.75)


def test_meaningful_spans_json_and_python():
    text = '[{"name": "area", "arguments": {"r": 2, "unit": "cm", "opts": {"x": [1, true]}}}]'
    assert [text[a:b] for a, b in meaningful_spans(text)] == ["area", "2", "cm", "1", "true"]
    text = 'Sure:\n```json\n{"name": "é.f", "arguments": {"s": "naïve"}}\n```'
    assert [text[a:b] for a, b in meaningful_spans(text)] == ["é.f", "naïve"]
    text = "[math.hypot(x=4, y=-5), g('a')]"
    assert [text[a:b] for a, b in meaningful_spans(text)] == ["math.hypot", "4", "-5", "g", "a"]
    assert meaningful_spans("I cannot call a function.") is None


def test_meaningful_logprob_hand_computed():
    tokens = ['[{"', "name", '":', ' "', "area", '",', ' "', "arguments", '":', ' {"', "r",
              '":', " 2", "}}]"]
    lp = np.full(len(tokens), -5.0)
    lp[4], lp[12] = -0.2, -0.6  # "area" and " 2" carry the meaning
    r = record([], greedy=gen("".join(tokens), lp, tokens))
    value, reason = run_scorer(SCORERS["meaningful_logprob"], r)
    assert reason is None and value == pytest.approx(-0.4)


def test_meaningful_logprob_without_a_call_cannot_score():
    r = record([], greedy=gen("Paris is nice", [-0.1, -0.2, -0.3], ["Paris", " is", " nice"]))
    value, reason = run_scorer(SCORERS["meaningful_logprob"], r)
    assert math.isnan(value) and "no parseable function call" in reason


def test_semantic_calibration_error_hand_computed():
    def graded(item_id, greedy, samples, correct):
        r = record([gen(s) for s in samples], greedy=gen(greedy), item_id=item_id)
        r.grades["exact"] = correct
        return r

    records = [graded("a", "x", ["x", "x"], 1.0),   # frequency 1.0
               graded("b", "x", ["x", "x"], 0.0),   # 1.0
               graded("c", "x", ["y", "z"], 0.0),   # 0.0
               graded("d", "x", ["x", "y"], 1.0)]   # 0.5
    # two bins: [0, .5) holds 0.0 (gap 0); [.5, 1] holds 1, 1, .5 with 2 right: |2 - 2.5| / 4
    assert semantic_calibration_error(records, n_bins=2) == pytest.approx(0.125)
    with pytest.raises(InvalidInputError, match="no samples"):
        semantic_calibration_error([record([], item_id="e")], grader="exact")
    with pytest.raises(InvalidInputError, match="grader"):
        semantic_calibration_error([record(SAMPLES)])


@pytest.mark.parametrize("name", SEMANTIC + ["meaningful_logprob"])
def test_semantic_scorers_document_formula_and_source(name):
    doc = SCORERS[name].fn.__doc__ or ""
    assert ".. math::" in doc and "References" in doc


@pytest.mark.model
def test_real_model_run_with_three_samples(hf_model, tmp_path):
    from confide import api

    run = api.generate_and_evaluate(hf_model, task="triviaqa",
                                    scorers=["semantic_entropy", "agreement"], n_samples=3,
                                    limit=4, max_new_tokens=16, out=tmp_path / "run")
    assert len(run.records) == 4
    for r in run.records:
        assert len(r.samples) == 3 and all(s.token_logprobs is not None for s in r.samples)
        assert any(r.scores["agreement"] == pytest.approx(v) for v in (0, 1 / 3, 2 / 3, 1))
        assert -math.log(3) - 1e-9 <= r.scores["semantic_entropy"] <= 0
    assert run.config["judge"] is None  # the task's default judge (exact for triviaqa)


def test_word_units_split_words_and_punctuation_within_token_bounds():
    from confide.scorers.relevance import word_units

    assert word_units([" 1", ",", "000", " km"]) == [[0], [1], [2], [3]]
    assert word_units(["Shakes", "peare", "'s"]) == [[0, 1], [2]]
    assert word_units(["\n", "Paris"]) == [[0], [1]]


def test_mars_hand_computed():
    from confide.scorers.relevance import MARS_TEMPERATURE, mars_value

    ell = np.log([0.5, 0.9, 0.6])
    units, importance = [[0, 1], [2]], np.array([0.1, 0.4])  # scaled to (0.25, 1)
    w = np.exp(np.array([0.25, 1.0]) / MARS_TEMPERATURE)
    w /= w.sum()
    unit_lp = np.array([np.mean(ell[:2]), ell[2]])
    assert mars_value(ell, units, importance) == pytest.approx(0.5 * w @ unit_lp
                                                               + 0.5 * ell.mean())
    # no unit matters: uniform weights over units
    assert mars_value(ell, units, np.zeros(2)) == pytest.approx(0.5 * unit_lp.mean()
                                                                + 0.5 * ell.mean())


def test_mars_weighs_a_doubtful_key_word_more_than_a_doubtful_filler():
    tokens = ["The", " capital", " is", " Paris"]
    key = gen("The capital is Paris", np.log([0.9, 0.9, 0.9, 0.2]), tokens)
    filler = gen("The capital is Paris", np.log([0.9, 0.9, 0.2, 0.9]), tokens)
    # the same length-normalised likelihood, but the doubt sits on the answer in `key`
    assert np.mean(key.token_logprobs) == pytest.approx(np.mean(filler.token_logprobs))
    assert score("mars", record([], greedy=key)) < score("mars", record([], greedy=filler))


# Issue "Numbers that hold under audit", item 2: 2 x "Paris" + 8 empty samples scored 0.000
# (semantic_entropy_weighted) and 1.000 (semantic_density), exactly 10 x "Paris".
LIKELIHOOD_WEIGHTED = ["semantic_entropy_weighted", "semantic_density", "sentence_sar", "sar"]


@pytest.mark.parametrize("name", LIKELIHOOD_WEIGHTED)
def test_empty_samples_count_as_disagreement_in_likelihood_weighted_scorers(name):
    paris, empty = gen("Paris", [-0.2]), gen("", [])
    greedy = gen("Paris", [-0.2])
    partly = score(name, record([paris] * 2 + [empty] * 8, greedy=greedy))
    agreeing = score(name, record([paris] * 10, greedy=greedy))
    lyon = score(name, record([paris] * 2 + [gen("Lyon", [-0.2])] * 8, greedy=greedy))
    assert partly < agreeing, f"{name}: 2 x Paris + 8 empty {partly} >= 10 x Paris {agreeing}"
    if name == "semantic_entropy_weighted":
        # each empty sample a cluster of its own, weighted as a typical sample: a tenth each
        assert agreeing == 0.0
        assert partly == pytest.approx(0.2 * math.log(0.2) + 8 * 0.1 * math.log(0.1))
        assert partly == pytest.approx(-2.1640, abs=5e-5)
        assert partly < lyon  # eight empty answers disagree more than eight equal ones
    if name == "semantic_density":
        # the greedy answer, "Paris" and "" as distinct answers of one weight: 2/3
        assert agreeing == 1.0 and partly == pytest.approx(2 / 3) == lyon
