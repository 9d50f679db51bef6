"""Issue 38, the import boundary: a log that is not what it claims is refused at the
record that shows it, named ``file:line: field:``, never read the wrong way and never
past the reader (to a scorer, a store, an export).

Each test builds the hostile file the issue describes and reads it through the public
API and the ``confide score`` command.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import InvalidInputError
from confide.ingest import detect, detect_format, read_generations
from confide.runs.importing import import_file
from confide.store.run_store import RunStore

runner = CliRunner()


def _write(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _chat(content: str, steps: list[tuple[str, float, list[tuple[str, float]]]],
          **extra: object) -> dict:
    """An OpenAI chat response whose one choice has these token statistics."""
    return {"object": "chat.completion", "model": "m", **extra, "choices": [
        {"index": 0, "finish_reason": "stop",
         "message": {"role": "assistant", "content": content},
         "logprobs": {"content": [
             {"token": t, "logprob": lp,
              "top_logprobs": [{"token": a, "logprob": v} for a, v in top]}
             for t, lp, top in steps]}}]}


def _said(result) -> str:
    return " ".join(result.output.split())


# -- detection: the required fields of exactly one format ---------------------------------

def test_a_confide_record_with_an_outputs_field_is_not_read_as_vllm(tmp_path):
    log = _write(tmp_path / "mine.jsonl",
                 {"id": "a", "question": "Capital of France?", "answer": "Paris",
                  "outputs": [{"text": "Lyon"}]})
    with pytest.raises(InvalidInputError) as info:
        detect_format(log)
    message = str(info.value)
    assert message.startswith(f"{log}:1: format: the record fits more than one log format")
    assert "vllm: an 'outputs' list" in message and "jsonl: 'question' and a text 'answer'" \
        in message
    # Told which it is, it reads the record's own answer.
    (record,) = list(read_generations(log, "jsonl"))
    assert record.greedy.text == "Paris" and record.item.metadata["outputs"] == [
        {"text": "Lyon"}]
    shown = runner.invoke(app, ["score", str(log), "--out", str(tmp_path / "run")])
    assert shown.exit_code == 1 and "Traceback" not in shown.output
    assert "fits more than one log format" in _said(shown)


def test_a_confide_record_with_a_response_object_is_read_as_its_own(tmp_path):
    # An Ollama reply nested in a metadata field fits llamacpp only as a nested pair, so
    # confide's own form, whose fields are the record's, wins; the CLI says why.
    log = _write(tmp_path / "mine.jsonl",
                 {"id": "a", "question": "Capital of France?", "answer": "Paris",
                  "response": {"model": "x", "response": "Lyon", "done": True}})
    assert detect(log) == ("jsonl", "'question' and a text 'answer' (confide's own form)")
    (record,) = list(read_generations(log))
    assert record.greedy.text == "Paris"
    shown = runner.invoke(app, ["score", str(log), "--out", str(tmp_path / "run"),
                                "--scorers", "length"])
    assert shown.exit_code == 0, shown.output
    assert "as jsonl (detected: 'question' and a text 'answer'" in _said(shown)


# -- text that is valid JSON but not Unicode -------------------------------------------------

def test_a_lone_surrogate_is_refused_at_its_field_and_never_stored(tmp_path):
    good = json.dumps({"id": "a", "question": "Q?", "answer": "Paris"})
    bad = '{"id": "b", "question": "Q?", "answer": "Par\\udcffis"}'
    log = tmp_path / "log.jsonl"
    log.write_text("\n".join([good, bad, good.replace('"a"', '"c"')]) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=rf"^{log}:2: answer: invalid Unicode: a lone "
                                                r"surrogate \\udcff"):
        list(read_generations(log))
    out = tmp_path / "run"
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:2: answer: invalid Unicode"):
        import_file(log, out, scorers="free")
    assert len(RunStore.open(out)) == 1  # what came before it is kept
    done = import_file(log, out, scorers="free", on_bad_record="skip")
    assert done.total == 2 and done.bad_records[0][0] == f"{log}:2"
    # Every export of what was stored works: no lone surrogate reached the store.
    for fmt in ("jsonl", "openai", "csv"):
        target = runner.invoke(app, ["export", str(out), "--format", fmt])
        assert target.exit_code == 0, target.output
    nested = tmp_path / "nested.jsonl"
    nested.write_text('{"id": "a", "question": "Q?", "answer": "ok", '
                      '"metadata": {"notes": ["fine", "x\\ud800"]}}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"nested\.jsonl:1: metadata\.notes\[1\]: "
                                                "invalid Unicode"):
        list(read_generations(nested))


# -- statistics that contradict each other ---------------------------------------------------

@pytest.mark.parametrize("steps, field, says", [
    # alternatives whose probabilities sum to 3: boostedprob read 2.0 from them
    ([("Paris", math.log(0.9), [("Paris", math.log(0.9)), ("Lyon", math.log(0.9)),
                                ("Rome", math.log(0.9)), ("Nice", math.log(0.3))])],
     "choices[0].logprobs.content[0].top_logprobs", "the listed probabilities sum to 3"),
    # the chosen token's log-probability is not its own entry among the alternatives
    ([("Paris", -0.1, [("Paris", -2.0), ("Lyon", -3.0)])],
     "choices[0].logprobs.content[0].logprob", "has log-probability -0.1, but -2 among"),
])
def test_impossible_token_statistics_are_refused(tmp_path, steps, field, says):
    log = _write(tmp_path / "log.jsonl", _chat("Paris", steps))
    with pytest.raises(InvalidInputError) as info:
        list(read_generations(log))
    assert str(info.value).startswith(f"{log}:1: {field}: ") and says in str(info.value)


def test_tokens_that_do_not_spell_the_answer_are_refused(tmp_path):
    log = _write(tmp_path / "log.jsonl",
                 _chat("Paris", [("Lon", -0.2, []), ("don", -0.1, [])]))
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:1: choices\[0\]\.logprobs\."
                                                r"content: the tokens spell 'London' but the "
                                                r"answer is 'Paris'"):
        list(read_generations(log))
    # white space, a BPE space mark and a token past the answer (end of turn) are fine
    fine = _write(tmp_path / "fine.jsonl",
                  {"id": "a", "question": "Q?", "answer": " New York",
                   "tokens": ["\u0120New", " York", "<|im_end|>"],
                   "token_logprobs": [-0.1, -0.2, -0.3]})
    (record,) = list(read_generations(fine))
    assert record.greedy.text == "New York"


@pytest.mark.parametrize("indices, says", [
    ([-1, 0], "must be from 0 to 1 (one per choice), not -1"),
    ([0, 0], "index 0 is given twice"),
    ([0, 5], "must be from 0 to 1 (one per choice), not 5"),
])
def test_choice_indices_must_number_the_choices(tmp_path, indices, says):
    # A negative index made a sample the graded answer.
    response = {"id": "r", "object": "chat.completion", "choices": [
        {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        for i, text in zip(indices, ["Paris", "Lyon"], strict=True)]}
    log = _write(tmp_path / "log.jsonl", response)
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:1: choices\[\d\]\.index: ") as info:
        list(read_generations(log))
    assert says in str(info.value)


# -- what the bytes are -------------------------------------------------------------------

@pytest.mark.parametrize("compress, suffix", [(gzip.compress, ".gz"), (bz2.compress, ".bz2"),
                                              (lzma.compress, ".xz")])
def test_compressed_logs_read_as_the_plain_one(tmp_path, compress, suffix):
    plain = _write(tmp_path / "log.jsonl",
                   _chat("Paris", [("Paris", -0.2, [("Paris", -0.2), ("Lyon", -2.0)])]),
                   _chat("Rome", [("Rome", -0.9, [("Rome", -0.9), ("Milan", -0.7)])]))
    packed = tmp_path / f"log.jsonl{suffix}"
    packed.write_bytes(compress(plain.read_bytes()))
    a, b = list(read_generations(plain)), list(read_generations(packed))
    assert [r.greedy.text for r in b] == ["Paris", "Rome"]
    assert [r.greedy.token_logprobs.tolist() for r in a] == [
        r.greedy.token_logprobs.tolist() for r in b]
    assert b[0].item.id == "log-1"  # the default id reads the name without .jsonl.gz
    outcome = import_file(packed, tmp_path / "run", scorers="msp")
    assert outcome.total == 2


def test_a_damaged_gzip_log_names_the_file(tmp_path):
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"id": "a", "question": "Q?", "answer": "x"}\n' * 50)[:40])
    with pytest.raises(InvalidInputError, match=rf"^{packed}: encoding: the gzip data is "
                                                "damaged or cut short"):
        list(read_generations(packed, "jsonl"))


@pytest.mark.parametrize("head, says", [
    (b"PAR1", "a Parquet file; confide score reads JSON logs"),
    (b"PK\x03\x04", "a zip archive; unzip it first"),
])
def test_files_of_another_kind_are_named_with_what_to_do(tmp_path, head, says):
    path = tmp_path / "log.data"
    path.write_bytes(head + b"\x00" * 64)
    shown = runner.invoke(app, ["score", str(path), "--out", str(tmp_path / "run")])
    assert shown.exit_code == 1 and "Traceback" not in shown.output
    assert f"{path}: {says}" in _said(shown)
    shown = runner.invoke(app, ["score", str(tmp_path), "--out", str(tmp_path / "run")])
    assert shown.exit_code != 0 and "Traceback" not in shown.output


def test_a_log_cut_short_says_so(tmp_path):
    whole = json.dumps({"id": "a", "question": "Q?", "answer": "Paris"})
    log = tmp_path / "log.jsonl"
    log.write_text(whole + "\n" + whole.replace('"a"', '"b"')[:30], encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:2: record: malformed JSON .*cut "
                                                "short, the file ends inside this record"):
        list(read_generations(log))
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"id": "a", "question": "Q?", "answer": "x", "m": '
                    + "[" * 5000 + "]" * 5000 + "}\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"deep\.jsonl:1: record: JSON nested too "
                                                "deeply to read"):
        list(read_generations(deep, "jsonl"))


def test_standard_input_is_refused_by_name(tmp_path):
    shown = runner.invoke(app, ["score", "-", "--out", str(tmp_path / "run")], input="{}\n")
    assert shown.exit_code == 1 and "Traceback" not in shown.output
    assert "-: standard input is not read: save the log to a file" in _said(shown)


def test_data_and_label_files_refuse_a_lone_surrogate_at_its_field(tmp_path):
    from confide.runs.labels import label_run
    from confide.tasks import load_task

    data = tmp_path / "qa.jsonl"
    data.write_text('{"id": "a", "question": "Q\\udcff?", "references": ["x"]}\n'
                    '{"id": "b", "question": "Q2?", "references": ["y"]}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=rf"^{data}:1: question: invalid Unicode"):
        load_task(str(data))
    kept = load_task(str(data), on_bad_record="skip")
    assert [it.id for it in kept.items] == ["b"] and kept.skipped[0][0] == f"{data}:1"
    array = tmp_path / "qa.json"
    array.write_text('[{"id": "a", "question": "Q?", "references": ["x\\ud800"]}]',
                     encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"qa\.json: references\[0\]: record 1: "
                                                "invalid Unicode"):
        load_task(str(array))
    run = tmp_path / "run"
    with RunStore.open(run, {"task": "t", "model": "m", "scorers": [], "grader": "contains",
                             "seed": 0}) as store:
        from tests.conftest import make_record
        store.put(make_record([-0.1], item_id="a", references=()), 0)
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "a", "label": 1, "note": "ok\\udcff"}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=rf"^{labels}:1: note: invalid Unicode"):
        label_run(run, labels, name="human")
