"""The log readers' shared parts: streamed JSON, steps → Generation, detection, options."""

from __future__ import annotations

import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confide.core.errors import InvalidInputError, UnknownNameError
from confide.ingest import DETECTION_ORDER, FORMATS, ImportedStream, detect_format, read_generations
from confide.ingest.common import (
    Step,
    answer_length,
    build_generation,
    capabilities_of,
    check_logprob,
    iter_json_records,
)

DATA = Path(__file__).parent / "data"
LN2 = math.log(2)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

EXAMPLES = {
    "openai_chat.jsonl": "openai", "openai_batch.jsonl": "openai",
    "openai_completions.json": "openai", "vllm_outputs.json": "vllm",
    "llamacpp_completion.jsonl": "llamacpp", "llamacpp_old.jsonl": "llamacpp",
    "ollama.jsonl": "llamacpp", "confide_log.jsonl": "jsonl",
    "samples_arc_easy_2024-05-01T12-00-00.123456.jsonl": "lmeval",
    "samples_triviaqa_2024-05-01T12-00-00.123456.jsonl": "lmeval",
    "samples_gsm8k_2024-05-01T12-00-00.123456.jsonl": "lmeval",
}


# --- detection -------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fmt"), sorted(EXAMPLES.items()))
def test_detect_format_names_each_example(name, fmt):
    assert detect_format(DATA / name) == fmt
    stream = read_generations(DATA / name)
    assert stream.format == fmt  # "auto" says which it chose
    records = list(stream)
    assert records and not stream.skipped and stream.count == len(records)


def test_every_example_file_is_listed():
    assert sorted(p.name for p in DATA.iterdir()) == sorted(EXAMPLES)


def test_every_format_is_registered_and_detectable():
    assert sorted(FORMATS) == sorted(DETECTION_ORDER)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_capabilities_are_need_values_and_never_need_the_full_distribution(name):
    # the Need values (confide.scorers.Need) a log can provide; never token_kl_uniform,
    # token_renyi_uniform, token_fisher_rao_uniform or hidden_states
    provided = {"token_logprobs", "top_logprobs", "token_entropies", "samples"}
    for record in read_generations(DATA / name):
        assert record.capabilities <= provided
        # entropies are bounds, and the record says so
        assert ("token_entropies" in record.capabilities) == (
            "token_entropies" in record.approximate)
        assert record.greedy.token_kl_uniform is None


def test_detect_format_unknown_record_names_file_line_and_keys(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('\n{"foo": 1, "bar": 2}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:2: format: .*keys: bar, foo"):
        detect_format(path)


def test_detect_format_empty_file(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match="empty.jsonl: no JSON object records"):
        detect_format(path)


def test_read_generations_checks_its_options(tmp_path):
    with pytest.raises(InvalidInputError, match="no such file"):
        read_generations(tmp_path / "missing.jsonl")
    path = DATA / "confide_log.jsonl"
    with pytest.raises(UnknownNameError, match="Did you mean 'openai'"):
        read_generations(path, "opnai")
    with pytest.raises(InvalidInputError, match="answer: must be one of first, greedy-file"):
        read_generations(path, answer="last")
    with pytest.raises(InvalidInputError, match="greedy_file"):
        read_generations(path, answer="greedy-file")
    with pytest.raises(InvalidInputError, match="on_bad_record"):
        read_generations(path, on_bad_record="ignore")


def test_read_generations_is_lazy_and_counts(tmp_path):
    stream = read_generations(DATA / "confide_log.jsonl")
    assert isinstance(stream, ImportedStream) and stream.count == 0
    assert next(stream).item.id == "q1"
    assert stream.count == 1 and "read=1" in repr(stream)


# --- bad records, skipping, ids -----------------------------------------------------------


def test_bad_records_raise_or_are_skipped_with_reasons(tmp_path):
    good = {"id": "a", "question": "Q?", "answer": "A"}
    lines = [json.dumps(good), "{not json", "[1, 2]",
             json.dumps({"id": "b", "question": "Q?", "answer": "B",
                         "token_logprobs": [0.5]}),
             json.dumps({"id": "a", "question": "Q?", "answer": "A again"}),
             json.dumps({"id": "c", "question": "Q?", "answer": "C"})]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:2: record: malformed JSON"):
        list(read_generations(path, "jsonl"))
    stream = read_generations(path, "jsonl", on_bad_record="skip")
    assert [r.item.id for r in stream] == ["a", "c"]
    where = [w.rsplit(":", 1)[1] for w, _ in stream.skipped]
    assert where == ["2", "3", "4", "5"]
    reasons = [r for _, r in stream.skipped]
    assert reasons[0].startswith("record: malformed JSON")
    assert reasons[1] == "record: expected a JSON object, got list"
    assert reasons[2].startswith("token_logprobs[0]: log-probability must be a finite number")
    assert reasons[3] == "id: duplicate id 'a'"


def test_not_utf8_line_is_a_skippable_bad_record(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"question": "Q", "answer": "A"}\n{"question": "\xff"}\n')
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:2: encoding: not UTF-8"):
        list(read_generations(path))
    stream = read_generations(path, on_bad_record="skip")
    assert [r.item.id for r in stream] == ["log-1"] and len(stream.skipped) == 1


def test_label_field_option(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"question": "Q", "answer": "A", "ok": 0.25}) + "\n",
                    encoding="utf-8")
    assert next(read_generations(path, label_field="ok")).label == 0.25
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:1: other: missing label field"):
        list(read_generations(path, label_field="other"))


def test_greedy_file_mode_makes_every_choice_a_sample(tmp_path):
    greedy = tmp_path / "greedy.jsonl"
    greedy.write_text(json.dumps({"id": "q1", "question": "Q?", "answer": "Paris",
                                  "token_logprobs": [-0.1], "label": 1}) + "\n",
                      encoding="utf-8")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(
        json.dumps({"id": "q1", "question": "Q?", "answer": "Lyon", "token_logprobs": [-2.0],
                    "samples": [{"answer": "Paris", "token_logprobs": [-0.3]}]}) + "\n"
        + json.dumps({"id": "q9", "question": "Q?", "answer": "x"}) + "\n", encoding="utf-8")
    stream = read_generations(samples, answer="greedy-file", greedy_file=greedy,
                              on_bad_record="skip")
    (record,) = list(stream)
    assert record.greedy.text == "Paris" and record.label == 1.0
    assert [s.text for s in record.samples] == ["Lyon", "Paris"]
    assert record.capabilities == {"token_logprobs", "samples"}
    assert stream.skipped == [(f"{samples}:2", f"id: no answer with id 'q9' in {greedy}")]


# --- streamed JSON -------------------------------------------------------------------------


def test_json_array_is_streamed_with_element_lines(tmp_path):
    path = tmp_path / "log.json"
    path.write_text('\ufeff[\n  {"a": 1},\n\n  {"b": [1,\n 2]}, 3.5 ,\n"x"\n]\n',
                    encoding="utf-8")
    assert list(iter_json_records(path, "log.json")) == [(2, {"a": 1}), (4, {"b": [1, 2]}),
                                                          (5, 3.5), (6, "x")]


def test_pretty_printed_objects_are_streamed(tmp_path):
    path = tmp_path / "log.json"
    path.write_text('{\n  "a": 1\n}\n{\n  "b": 2\n}\n', encoding="utf-8")
    assert list(iter_json_records(path, "log.json")) == [(1, {"a": 1}), (4, {"b": 2})]


def test_cut_array_yields_its_first_records_before_the_error(tmp_path):
    # Streamed, not loaded: the records before the damage come out first.
    path = tmp_path / "log.json"
    path.write_text("[" + ",\n".join(json.dumps({"n": i}) for i in range(3)) + ',\n{"n": 3',
                    encoding="utf-8")
    got = []
    with pytest.raises(InvalidInputError, match=r"log\.json:4: record: malformed JSON"):
        for _, obj in iter_json_records(path, "log.json"):
            got.append(obj["n"])
    assert got == [0, 1, 2]


@pytest.mark.parametrize(("text", "message"), [
    ('[{"a": 1} {"b": 2}]', "expected ',' or ']'"),
    ('[{"a": 1},', "not closed"),
    ('[{"a": 1}] {"b": 2}', "text after the closing"),
])
def test_malformed_array_names_the_line(tmp_path, text, message):
    path = tmp_path / "log.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInputError, match=message):
        list(iter_json_records(path, str(path)))


def test_large_array_is_read_in_bounded_memory(tmp_path):
    # 3,000 records of ~1.5 kB (4.5 MB): the reader holds one record and a 64 KiB chunk.
    record = {"outputs": [{"text": "x" * 1500}]}
    path = tmp_path / "big.json"
    with path.open("w", encoding="utf-8") as fh:
        fh.write("[\n" + ",\n".join(json.dumps(record) for _ in range(3000)) + "\n]\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        n = sum(1 for _ in iter_json_records(path, "big.json"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 3000
    assert peak < size / 8, (peak, size)


@FAST
@given(st.binary(max_size=300), st.sampled_from(["auto", *DETECTION_ORDER]),
       st.sampled_from(["raise", "skip"]), st.sampled_from([".jsonl", ".json"]))
def test_any_bytes_read_or_fail_with_the_input_error(tmp_path, data, fmt, policy, suffix):
    path = tmp_path / f"log{suffix}"
    path.write_bytes(data)
    try:
        for record in read_generations(path, fmt, on_bad_record=policy):
            assert isinstance(record.item.id, str)
    except InvalidInputError as exc:
        assert str(exc).startswith(str(path))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                  max_size=3),
    max_leaves=10)


@FAST
@given(st.lists(json_values, min_size=1, max_size=4), st.sampled_from(["auto", *DETECTION_ORDER]))
def test_any_json_read_or_fail_with_the_input_error(tmp_path, values, fmt):
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(v) for v in values) + "\n", encoding="utf-8")
    try:
        records = list(read_generations(path, fmt, on_bad_record="skip"))
    except InvalidInputError as exc:
        assert str(exc).startswith(str(path))
        # when skipping, only detection or JSON that cannot be stepped over may raise
        assert fmt == "auto" or path.read_text(encoding="utf-8").startswith("[")
        return
    assert all(isinstance(r.item.id, str) for r in records)


# --- steps → Generation --------------------------------------------------------------------


def test_build_generation_hand_computed_entropy_bound():
    # p = 1/2, 1/4, 1/8 listed; unseen mass 1/8, each unseen token at most 1/8:
    # H >= 1/2 log 2 + 1/4 log 4 + 1/8 log 8 + 1/8 log 8 = 1.75 log 2.
    top = [("a", math.log(.5)), ("b", math.log(.25)), ("c", math.log(.125))]
    gen, notes = build_generation("a", [Step("a", math.log(.5), top)])
    np.testing.assert_allclose(gen.token_entropies, [1.75 * LN2], rtol=1e-6)
    np.testing.assert_allclose(gen.token_logprobs, [-LN2], rtol=1e-6)
    assert gen.top_tokens == [["a", "b", "c"]]
    assert notes == {"token_entropies": "lower bounds from the top 3 log-probabilities of "
                                        "each token"}


def test_build_generation_chosen_token_outside_the_top_counts_as_known():
    # top 1/2, 1/4; chosen 1/20 not among them: S = {1/2, 1/4, 1/20}, R = 1/5, p_(k) = 1/4.
    top = [("a", math.log(.5)), ("b", math.log(.25))]
    gen, _ = build_generation("z", [Step("z", math.log(.05), top)])
    expected = .5 * LN2 + .25 * math.log(4) + .05 * math.log(20) + .2 * math.log(4)
    np.testing.assert_allclose(gen.token_entropies, [expected], rtol=1e-6)


def test_step_sets_apart_a_sampled_token_listed_beyond_the_top_k():
    step = Step("b", math.log(.1), [("a", math.log(.8)), ("b", math.log(.1))],
                extra_possible=True)
    assert step.ranked() == ([("a", math.log(.8))], [math.log(.1)])
    # without extra_possible the list is a top-k: the chosen token is in it
    step.extra_possible = False
    assert step.ranked() == ([("a", math.log(.8)), ("b", math.log(.1))], [])


def test_build_generation_without_statistics():
    gen, notes = build_generation(" Paris ", None)
    assert gen.text == "Paris" and gen.token_logprobs is None and notes == {}
    gen, _ = build_generation("Paris", [])  # empty token list, non-empty answer: no stats
    assert gen.token_logprobs is None and gen.top_logprobs is None
    gen, _ = build_generation("", [])  # an empty answer has (vacuous) statistics
    assert gen.token_logprobs.shape == (0,) and gen.top_logprobs.shape == (0, 0)


def test_build_generation_cuts_tokens_past_the_answer():
    steps = [Step("Par", -.1, [("Par", -.1)]), Step("is", -.2, [("is", -.2)]),
             Step("\n", -.3, [("\n", -.3)]), Step("<eos>", -.01, [("<eos>", -.01)])]
    gen, _ = build_generation("Paris", steps)
    assert gen.tokens == ["Par", "is"]
    np.testing.assert_allclose(gen.token_logprobs, [-.1, -.2], rtol=1e-6)
    gen, _ = build_generation("Paris", steps, cut=False)
    assert len(gen.tokens) == 4


def test_build_generation_k_is_the_fewest_alternatives():
    steps = [Step("a", -.1, [("a", -.1), ("b", -3.0)]), Step("c", -.2, [])]
    gen, notes = build_generation("ac", steps)
    assert gen.top_logprobs is None and gen.token_entropies is None and notes == {}
    assert gen.token_logprobs is not None


def test_answer_length_and_check_logprob():
    assert answer_length(["a", "b", ""], "ab") == 2
    assert check_logprob(0, "f") == 0.0
    for bad in (0.1, math.nan, -math.inf, True, "1", None):
        with pytest.raises(Exception, match="f: log-probability must be"):
            check_logprob(bad, "f")


def test_capabilities_need_every_sample():
    with_stats, _ = build_generation("a", [Step("a", -.1, [("a", -.1)])])
    plain, _ = build_generation("b", None)
    assert capabilities_of(with_stats, []) == {"token_logprobs", "top_logprobs",
                                               "token_entropies"}
    assert capabilities_of(with_stats, [plain]) == {"samples"}
    assert capabilities_of(with_stats, [with_stats]) == {"token_logprobs", "top_logprobs",
                                                         "token_entropies", "samples"}


def test_malformed_element_is_reported_without_reading_the_rest(tmp_path, monkeypatch):
    # The damage is found where it is; the megabytes after it are not read first.
    from confide.ingest import common

    path = tmp_path / "log.json"
    with path.open("w", encoding="utf-8") as fh:
        fh.write('[{"a": 1},\n{"b": 2 3},\n')
        fh.write(",\n".join(json.dumps({"pad": "x" * 1000}) for _ in range(2000)) + "]")
    reads = []
    real = common._Buffer.more

    def counting(self, at_least=common.CHUNK):
        reads.append(at_least)
        return real(self, at_least)

    monkeypatch.setattr(common._Buffer, "more", counting)
    with pytest.raises(InvalidInputError, match=r"log\.json:2: record: malformed JSON"):
        list(iter_json_records(path, str(path)))
    assert len(reads) <= 2


def test_elements_longer_than_the_read_chunk_are_read_whole(tmp_path):
    big = {"text": "é" * (3 * 65536), "n": 12345678901234567890}
    path = tmp_path / "log.json"
    path.write_text(json.dumps([big, big], ensure_ascii=False), encoding="utf-8")
    assert [obj for _, obj in iter_json_records(path, "log.json")] == [big, big]
