"""A reasoning reply as two spans (confide.core.reasoning): the split on hand-made tokens,
the grade of a missing final answer, the stored run's note, the export round trip and the
scorers' span."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.core.errors import InvalidInputError
from confide.core.reasoning import (
    DEFAULT_TAGS,
    final_answer_missing,
    missing_answer_reason,
    reasoning_tags,
    split_reasoning,
    trace_split,
    with_trace,
)
from confide.core.records import Generation, Item, MemberStatistics, Record
from confide.grading import grade
from confide.pipeline.answering import grade_record
from confide.scorers import SCORERS, run_scorer
from confide.scorers.base import scorer
from confide.store.run_store import RunStore


def _gen(tokens: list[str], text: str | None = None, finish: str = "stop") -> Generation:
    """A reply whose tokens spell its text, each token's statistics its index (so a cut
    shows which tokens went where)."""
    n = len(tokens)
    idx = np.arange(n, dtype=np.float32)
    return Generation(
        text=("".join(tokens) if text is None else text).strip(), tokens=list(tokens),
        token_ids=list(range(100, 100 + n)), token_logprobs=-idx, token_entropies=idx,
        top_logprobs=np.stack([-idx, -idx - 1], axis=1).reshape(n, 2),
        top_tokens=[[t, "x"] for t in tokens], finish_reason=finish,
        members=MemberStatistics(logprobs=np.stack([-idx, -2 * idx]).reshape(2, n),
                                 mean_entropy=idx, method="lora"),
        hidden={"-1:mean": np.ones(4, np.float16)})


def _ids(gen: Generation) -> list[int]:
    return [int(-v) for v in gen.token_logprobs]  # the token's index in the whole reply


# ----------------------------------------------------------------------- the split


def test_split_with_the_closing_tag_across_tokens():
    reply = _gen(["<think>", "2+2", " is 4", "</", "think", ">", "\n\n", "The", " answer", " is",
                  " 4"])
    g = split_reasoning(reply)
    assert (g.text, g.trace.text) == ("The answer is 4", "2+2 is 4")
    assert g.trace.tokens == ["<think>", "2+2", " is 4", "</", "think", ">"]
    assert g.tokens == ["\n\n", "The", " answer", " is", " 4"]  # white space before the answer
    assert _ids(g.trace) == [0, 1, 2, 3, 4, 5] and _ids(g) == [6, 7, 8, 9, 10]
    assert g.token_ids == [106, 107, 108, 109, 110] and g.trace.token_ids[-1] == 105
    np.testing.assert_array_equal(g.token_entropies, [6, 7, 8, 9, 10])
    np.testing.assert_array_equal(g.top_logprobs[:, 1], [-7, -8, -9, -10, -11])
    assert g.top_tokens[0] == ["\n\n", "x"] and g.trace.top_tokens[-1] == [">", "x"]
    np.testing.assert_array_equal(g.members.logprobs, [[-6, -7, -8, -9, -10],
                                                       [-12, -14, -16, -18, -20]])
    assert g.members.method == "lora" and g.trace.members.logprobs.shape == (2, 6)
    assert g.hidden is reply.hidden and g.trace.hidden is None  # pooled states: the answer's
    assert (g.finish_reason, g.trace.finish_reason) == ("stop", "stop")
    assert not final_answer_missing(g) and missing_answer_reason(g) is None


def test_a_token_straddling_the_closing_tag_belongs_to_the_trace():
    g = split_reasoning(_gen(["<think>", "hm", "</think>\n\nThe", " end"]))
    assert g.trace.tokens == ["<think>", "hm", "</think>\n\nThe"] and g.tokens == [" end"]
    assert (g.text, g.trace.text) == ("The end", "hm")  # the text keeps its first word


def test_split_without_an_opening_tag_takes_the_text_up_to_the_closing_one():
    # DeepSeek-R1's template puts "<think>\n" in the prompt: the reply opens inside it
    g = split_reasoning(_gen(["Let", " me", " see", ".", "\n</think>", "\n\n", "Paris"]))
    assert (g.text, g.trace.text) == ("Paris", "Let me see.")
    assert _ids(g.trace) == [0, 1, 2, 3, 4] and _ids(g) == [5, 6]


def test_a_trace_cut_by_the_budget_has_no_final_answer():
    g = split_reasoning(_gen(["<think>", "Let", " me", " think"], finish="length"))
    assert g.text == "" and g.tokens == [] and len(g.token_logprobs) == 0
    assert g.top_logprobs.shape == (0, 2) and g.members.logprobs.shape == (2, 0)
    assert g.trace.text == "Let me think" and _ids(g.trace) == [0, 1, 2, 3]
    assert (g.finish_reason, g.trace.finish_reason) == ("length", "length")
    assert final_answer_missing(g)
    assert "token budget ran out inside the reasoning trace" in missing_answer_reason(g)
    never_closed = split_reasoning(_gen(["<think>", "Hmm"]))  # stopped, never closed
    assert final_answer_missing(never_closed)
    assert missing_answer_reason(never_closed) == "no final answer after the reasoning trace"


def test_an_empty_trace_keeps_its_tag_tokens():
    g = split_reasoning(_gen(["<think>", "</think>", "\n\n", "Paris"]))
    assert (g.text, g.trace.text, g.trace.tokens) == ("Paris", "", ["<think>", "</think>"])
    assert _ids(g) == [2, 3] and not final_answer_missing(g)


def test_a_trace_only_of_the_answer():
    g = split_reasoning(_gen(["<think>", "Paris", "</think>", "Paris"]))
    assert (g.text, g.trace.text) == ("Paris", "Paris") and _ids(g) == [3]
    inside = split_reasoning(_gen(["<think>", "Paris", "</think>"]))  # the answer only inside
    assert inside.text == "" and inside.trace.text == "Paris" and final_answer_missing(inside)


def test_a_reply_without_tags_is_left_as_it_is():
    reply = _gen(["I", " think", " <think>", " is", " a", " tag"])  # not at the start: no trace
    assert split_reasoning(reply) is reply and reply.trace is None
    done = split_reasoning(_gen(["<think>", "a", "</think>", "b"]))
    assert split_reasoning(done) is done  # a generation with a trace is not split again


def test_split_with_other_tags_and_partial_bytes():
    g = split_reasoning(_gen(["[R]", "caf", "\ufffd", "\ufffd", "[/R]", "ok"],
                             text="[R]café[/R]ok"), ("[R]", "[/R]"))
    assert (g.text, g.trace.text, _ids(g)) == ("ok", "caf\u00e9", [5])
    # the closing tag's characters not verbatim in the tokens: aligned to the text instead
    g = split_reasoning(_gen(["<think>", "x", "</th", "\ufffdk>", "y"], text="<think>x</think>y"))
    assert (g.text, _ids(g.trace), _ids(g)) == ("y", [0, 1, 2, 3], [4])


def test_split_of_a_reply_whose_tokens_are_unknown_keeps_texts_only():
    reply = Generation("<think>a</think>b", token_ids=[1, 2, 3],
                       token_logprobs=np.zeros(3, np.float32))
    g = split_reasoning(reply)
    assert (g.text, g.trace.text) == ("b", "a")
    assert g.token_logprobs is None and g.token_ids == [] and g.trace.token_logprobs is None
    plain = split_reasoning(Generation("<think>a</think>b"))  # text only: nothing to cut
    assert plain.tokens == [] and plain.trace.tokens == []


def test_reasoning_tags_parse_and_refuse():
    assert reasoning_tags("<think>,</think>") == DEFAULT_TAGS
    assert reasoning_tags(["<r>", "</r>"]) == ("<r>", "</r>")
    assert all(reasoning_tags(v) is None for v in (None, False, "", "none", "OFF"))
    for bad in ("<think>", "a,b,c", ",</think>", " <t>,</t>", "<t>,<t>", ["<ab>", "b>"], 3):
        with pytest.raises(InvalidInputError, match="reasoning_tags"):
            reasoning_tags(bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------------- a field of its own


def test_trace_split_rules():
    assert trace_split(["Hm", "</think>", "4"], "Hm", "4") == 2  # the closing tag
    assert trace_split(["Hm", " so", "\n\n4", "<|im_end|>"], "Hm so", "4") == 2  # spelled
    assert trace_split(["<think>", "Hm", " so"], "Hm so", "") == 3  # never closed
    assert trace_split([" 4"], "Hm so", "4") == 0  # the answer's tokens alone
    with pytest.raises(ValueError, match="spell neither"):
        trace_split(["x", "y"], "Hm", "4")
    with pytest.raises(ValueError, match="do not spell the answer"):
        trace_split(["Hm", "</think>", "5"], "Hm", "4")
    with pytest.raises(ValueError, match="do not spell the reasoning"):
        trace_split(["Ok", "</think>", "4"], "Hm", "4")


def test_with_trace_cuts_the_tokens_past_the_answer():
    g = with_trace("\n\nParis", " Capital. ", _gen(["Capital", ".", "\n\n", "Paris",
                                                     "<|im_end|>"]))
    assert (g.text, g.trace.text, _ids(g.trace), _ids(g)) == ("Paris", "Capital.", [0, 1],
                                                               [2, 3])
    cut = with_trace("", "Capital", _gen(["Capital"], finish="length"))
    assert final_answer_missing(cut) and cut.trace.finish_reason == "length"
    texts = with_trace("4", "Hm", finish_reason="length")
    assert (texts.text, texts.trace.text, texts.finish_reason) == ("4", "Hm", "length")


# ----------------------------------------------------------------------- grading and scoring


ITEM = Item("q", "What is 2+2?", ["4"])


def test_a_missing_final_answer_is_ungraded_with_its_reason():
    cut = split_reasoning(_gen(["<think>", "2+2", " is", " 4"], finish="length"))
    record = Record(ITEM, cut)
    grade_record(record, "numeric")
    assert record.grades == {}  # not graded wrong: ungraded
    assert "token budget ran out" in record.grade_errors["numeric"]
    again = Record.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.grade_errors == record.grade_errors and again.greedy.trace.text == "2+2 is 4"
    answered = Record(ITEM, split_reasoning(_gen(["<think>", "5?", "</think>", "#### 4"])))
    grade_record(answered, "numeric")
    assert answered.grades == {"numeric": 1.0} and answered.grade_errors == {}
    assert "grade_errors" not in answered.to_dict()  # only when present


def test_the_graders_read_the_final_answer():
    # the trace holds the reference; the answer is wrong: the answer is graded
    g = split_reasoning(Generation("<think>Is it 4? No, 5.</think> The answer is 5."))
    assert grade(g.text, ITEM, "contains") == 0.0 and grade(g.text, ITEM, "numeric") == 0.0
    for text in ("#### 4", "so $\\boxed{4}$", "The answer is 4.", "The final answer is 4"):
        assert grade(text, ITEM, "numeric") == 1.0, text
    mc = Item("m", "Which?", ["B"], {"choices": ["bank", "mall", "park"]})
    for text in ("\\boxed{B}", "\\boxed{\\text{(B)}}", "**Answer:** B", "The answer is **B**.",
                 "A looks right, but no: \\boxed{A} is wrong, so \\boxed{B}"):
        assert grade(text, mc, "choice") == 1.0, text


def test_answer_level_scorers_give_nan_for_a_missing_final_answer():
    cut = split_reasoning(_gen(["<think>", "a", " b"], finish="length"))
    for name in ("msp", "mean_logprob", "mean_entropy", "length"):
        value, why = run_scorer(SCORERS[name], Record(ITEM, cut))
        assert math.isnan(value) and "empty answer" in why, name
    # the answer's statistics only: -(0.0 + ... ) over tokens 3, 4 of the reply
    answered = split_reasoning(_gen(["<think>", "a", "</think>", "4", "."]))
    value, _ = run_scorer(SCORERS["mean_logprob"], Record(ITEM, answered))
    assert value == pytest.approx(-3.5)


# ----------------------------------------------------------------------- store, export, import


def _openai_log(path):
    def entry(token, lp, alt):
        return {"token": token, "logprob": lp, "top_logprobs": [
            {"token": token, "logprob": lp}, {"token": alt, "logprob": lp - 4.0}]}

    trace = [entry("<think>", -0.125, "<"), entry("2+2", -0.5, "3+3"), entry(" is 4", -0.25, "4"),
             entry("</think>", -0.125, "\n")]
    answer = [entry("\n\n", -0.0625, " "), entry("4", -0.75, "5")]
    replies = [
        {"message": {"role": "assistant", "content": "\n\n4",
                     "reasoning_content": "2+2 is 4"}, "logprobs": {"content": trace + answer},
         "finish_reason": "stop"},
        {"message": {"role": "assistant", "content": "",
                     "reasoning_content": "2+2 is 4"}, "logprobs": {"content": trace[:3]},
         "finish_reason": "length"},
    ]
    lines = [{"id": f"q{i}", "object": "chat.completion", "model": "r1",
              "choices": [{"index": 0, **reply}], "request": {"prompt": "What is 2+2?"},
              "references": ["4"]} for i, reply in enumerate(replies)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _spans(record: Record) -> list[tuple]:
    out = []
    for g in (record.greedy, record.greedy.trace):
        out.append((g.text, g.tokens, g.finish_reason, g.token_logprobs.tolist(),
                    g.top_tokens, g.top_logprobs.tolist(), g.token_entropies.tolist()))
    return out


def test_openai_export_round_trip_keeps_both_spans(tmp_path):
    from confide.api import export, import_file
    from confide.runs.stored import Run

    outcome = import_file(_openai_log(tmp_path / "log.jsonl"), tmp_path / "run",
                          scorers="msp,mean_logprob,length", grader="numeric")
    assert outcome.graded == 1  # the cut trace is not graded
    run = Run(tmp_path / "run")
    first, cut = run.records
    assert (first.greedy.text, first.greedy.trace.text, first.grades) == ("4", "2+2 is 4",
                                                                          {"numeric": 1.0})
    assert first.scores["mean_logprob"] == pytest.approx((-0.0625 - 0.75) / 2)  # answer only
    assert final_answer_missing(cut.greedy) and cut.grades == {}
    assert math.isnan(cut.scores["msp"]) and cut.score_errors["msp"].startswith("empty answer")
    assert any("1 record(s) left ungraded by numeric, not counted wrong: no final answer: the "
               "token budget ran out" in note for note in run.notes)
    table = run.compute_table()
    assert (table.n_items, table.n_graded, table.accuracy[0]) == (2, 1, 1.0)
    path = export(tmp_path / "run", fmt="openai", out=tmp_path / "out.jsonl").path
    written = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    message = written["choices"][0]["message"]
    assert message["reasoning_content"] == "2+2 is 4" and message["content"] == "\n\n4"
    assert len(written["choices"][0]["logprobs"]["content"]) == 6  # the trace's, the answer's
    import_file(path, tmp_path / "again", scorers="msp,mean_logprob,length", grader="numeric")
    again = Run(tmp_path / "again").records
    for before, after in zip(run.records, again, strict=True):
        assert _spans(after) == _spans(before)
        assert after.scores == before.scores and after.grade_errors == before.grade_errors
    with RunStore.open(tmp_path / "again") as store:  # the same stored text, spans included
        assert [r.greedy.trace.to_dict() for r in store.records()] == \
            [r.greedy.trace.to_dict() for r in run.records]


def test_reasoning_tags_reach_import_and_can_be_turned_off(tmp_path):
    from confide.api import import_file
    from confide.runs.stored import Run

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"question": "2+2?", "answer": "[r]so 4[/r] 4",
                               "references": ["4"]}) + "\n", encoding="utf-8")
    import_file(log, tmp_path / "tags", scorers="length", reasoning_tags="[r],[/r]")
    (record,) = Run(tmp_path / "tags").records
    assert (record.greedy.text, record.greedy.trace.text) == ("4", "so 4")
    import_file(log, tmp_path / "off", scorers="length", reasoning_tags="none")
    (whole,) = Run(tmp_path / "off").records
    assert whole.greedy.text == "[r]so 4[/r] 4" and whole.greedy.trace is None
    with pytest.raises(InvalidInputError, match="reasoning_tags"):
        import_file(log, tmp_path / "bad", reasoning_tags="[r]")


def test_score_command_takes_reasoning_tags(tmp_path):
    from confide.cli.app import app

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"question": "2+2?", "answer": "<t>so 4</t>4"}) + "\n",
                   encoding="utf-8")
    result = CliRunner().invoke(app, ["score", str(log), "--out", str(tmp_path / "run"),
                                      "--scorers", "length", "--reasoning-tags", "<t>,</t>"])
    assert result.exit_code == 0, result.output
    with RunStore.open(tmp_path / "run") as store:
        (record,) = store.records()
    assert (record.greedy.text, record.greedy.trace.text) == ("4", "so 4")


# ----------------------------------------------------------------------- the scorers' span


def test_scorers_say_which_span_they_read():
    assert all(spec.span in ("answer", "trace", "both") for spec in SCORERS.values())
    assert SCORERS["msp"].span == "answer"
    with pytest.raises(ValueError, match="span must be one of"):
        scorer("never_registered_span", span="middle")  # type: ignore[arg-type]
    from confide.cli.app import app

    result = CliRunner().invoke(app, ["scorers"], terminal_width=400)
    assert result.exit_code == 0 and "span" in result.output
