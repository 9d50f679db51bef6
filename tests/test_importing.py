"""Score what you already have: a file of generations becomes an ordinary run."""

from __future__ import annotations

import hashlib
import json
import math
import random
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from confide.cli import app
from confide.core.errors import ConfigMismatch, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.ingest import read_generations
from confide.runs.importing import LABEL_GRADE, import_file, import_scorers
from confide.runs.stored import open_run
from confide.scorers import SCORERS, Cost, Need, run_scorer
from confide.store.exports import export_run, openai_response
from confide.store.run_store import RunStore

DATA = Path(__file__).parent / "ingest" / "data"
OPENAI_CHAT = DATA / "openai_chat.jsonl"
ARC = DATA / "samples_arc_easy_2024-05-01T12-00-00.123456.jsonl"
TRIVIA = DATA / "samples_triviaqa_2024-05-01T12-00-00.123456.jsonl"
WORDS = [" Paris", " London", " Rome", " the", " of", " a", " Berlin", " Madrid", ".", " is"]
SAMPLED = ("msp", "mean_logprob", "min_logprob", "mean_entropy", "probability_margin",
           "length", "semantic_entropy", "num_sets", "mc_entropy", "lexical_similarity")


def synthetic(path: Path, n: int, *, seed: int = 0, choices: int = 3, tokens: int = 4,
              label: bool = True) -> Path:
    """``n`` OpenAI chat responses with top-3 log-probabilities, ``choices`` choices each,
    references and (``label``) a label."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(n):
            out = []
            for c in range(choices):
                content = []
                for _ in range(rng.randint(1, tokens)):
                    words = rng.sample(WORDS, 3)
                    lps = sorted((math.log(rng.uniform(0.01, 0.33)) for _ in words), reverse=True)
                    content.append({"token": words[0], "logprob": lps[0],
                                    "bytes": list(words[0].encode()),
                                    "top_logprobs": [{"token": w, "logprob": v}
                                                     for w, v in zip(words, lps, strict=True)]})
                out.append({"index": c, "finish_reason": "stop",
                            "message": {"role": "assistant",
                                        "content": "".join(e["token"] for e in content)},
                            "logprobs": {"content": content}})
            record = {"id": f"q{i}", "object": "chat.completion", "model": "m-test",
                      "choices": out, "references": [rng.choice(["Paris", "Rome"])],
                      "request": {"messages": [{"role": "user", "content": f"Q{i}?"}]}}
            if label:
                record["label"] = rng.randint(0, 1)
            fh.write(json.dumps(record) + "\n")
    return path


def _same(a: float, b: float, tol: float = 0.0) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


def _by_id(run: Path) -> dict[str, Record]:
    with RunStore.open(run) as store:
        return {r.item.id: r for r in store.records()}


# ------------------------------------------------------------------------ the run


def test_import_openai_file_is_an_ordinary_run(tmp_path):
    out = tmp_path / "run"
    outcome = import_file(OPENAI_CHAT, out, scorers="free")
    assert outcome.format == "openai" and outcome.total == outcome.imported == 2
    with RunStore.open(out) as store:
        config = store.config
        assert config["kind"] == "import" and config["scorers"] == list(import_scorers("free"))
        source = config["source"]
        assert source["sha256"] == hashlib.sha256(OPENAI_CHAT.read_bytes()).hexdigest()
        assert source["size"] == OPENAI_CHAT.stat().st_size
        assert (source["format"], source["answer"]) == ("openai", "first")
        assert source["data_path"] == str(OPENAI_CHAT.resolve())
        assert store.get_meta("backend") == {"backend": "import", "format": "openai",
                                             "model": "gpt-4o-mini-2024-07-18"}
        assert "lower bounds" in store.get_meta("approximate")["token_entropies"]
        records = store.records()
    # scored where the statistics allow, graded by references and by the file's label
    assert all(not math.isnan(r.scores["msp"]) for r in records)
    graded = [r for r in records if r.item.references]
    assert graded and all("contains" in r.grades and LABEL_GRADE in r.grades for r in graded)
    # the same readers as any run
    table = open_run(out).compute_table(n_resamples=20)
    assert {row.scorer for row in table.rows} >= {"msp", "mean_entropy"}


def test_import_reports_the_detected_format_and_bounds_on_the_cli(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["score", str(OPENAI_CHAT), "--out", str(out),
                                      "--scorers", "msp,mean_entropy,self_certainty"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())  # Rich wraps long lines
    assert "as openai (detected: a 'choices' list" in shown
    assert "lower bounds" in shown
    assert "skipped self_certainty" in shown
    again = CliRunner().invoke(app, ["eval", str(out), "--resamples", "20"])
    assert again.exit_code == 0
    assert "note: token_entropies are lower bounds" in " ".join(again.output.split())


def test_text_only_file_gets_sampling_scorers_only(tmp_path):
    outcome = import_file(TRIVIA, tmp_path / "run")
    skipped = outcome.skipped_scorers
    assert skipped["msp"] == "imported generations: no token_logprobs in the file"
    assert skipped["verbalized_1s"] == ("needs the model (extra_prompt): imported "
                                        "generations have no model")
    assert skipped["self_certainty"].startswith("imported generations: no token_kl_uniform")
    assert "option_probability" in skipped
    ran = set(outcome.scorers)
    assert "length" in ran and not ran & {n for n in SCORERS if Need.TOKEN_LOGPROBS in
                                          SCORERS[n].needs}
    assert not outcome.has_logprobs
    assert any("no log-probabilities" in note for note in outcome.notes())
    for record in _by_id(tmp_path / "run").values():  # skipped scorers leave no column
        assert not set(record.scores) & set(skipped)
        assert not set(record.score_errors) & set(skipped)
    assert "msp" not in {row.scorer for row in open_run(tmp_path / "run").compute_table(
        n_resamples=10).rows}


def test_a_record_without_statistics_gets_nan_with_the_reason(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [{"id": "a", "question": "Q?", "answer": "Paris", "tokens": ["Par", "is"],
             "token_logprobs": [-0.5, -0.25], "references": ["Paris"]},
            {"id": "b", "question": "Q2?", "answer": "Rome", "references": ["Rome"]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    outcome = import_file(path, tmp_path / "run", scorers=["msp", "length"])
    assert outcome.skipped_scorers == {}
    records = _by_id(tmp_path / "run")
    assert records["a"].scores["msp"] == pytest.approx(-0.75)
    assert math.isnan(records["b"].scores["msp"])
    assert records["b"].score_errors["msp"] == ("this record has no token_logprobs "
                                                "(imported generations)")


def test_imported_boostedprob_applies_the_rule_to_the_logged_top_k(tmp_path):
    """A log has no token_boosted_prob: boostedprob reads the listed top-k. Record a's
    steps end at or below 0.005 (exact: 0.95 and 0.9, mean 0.925); record b's top-2 ends at
    0.3 with 0.4 unlisted, so the dominant group may reach past the list: NaN, with a
    reason that names what is missing rather than an option to raise."""
    path = tmp_path / "topk.jsonl"
    rows = [{"id": "a", "question": "Q?", "answer": "Paris", "tokens": ["Par", "is"],
             "token_logprobs": [math.log(0.5), math.log(0.9)],
             "top_logprobs": [{"Par": math.log(0.5), "Lon": math.log(0.45),
                               "Ber": math.log(0.004)},
                              {"is": math.log(0.9), "ise": math.log(0.004),
                               "x": math.log(0.003)}]},
            {"id": "b", "question": "Q2?", "answer": "Rome", "tokens": ["Rome"],
             "token_logprobs": [math.log(0.3)],
             "top_logprobs": [{"Rome": math.log(0.3), "Milan": math.log(0.3)}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    import_file(path, tmp_path / "run", scorers=["boostedprob"])
    records = _by_id(tmp_path / "run")
    assert all(r.greedy.token_boosted_prob is None for r in records.values())
    assert records["a"].scores["boostedprob"] == pytest.approx(0.925, rel=1e-6)
    assert math.isnan(records["b"].scores["boostedprob"])
    reason = records["b"].score_errors["boostedprob"]
    assert "beyond the 2 listed alternatives" in reason and "token_boosted_prob" in reason
    assert "raise" not in reason


def test_samples_are_scored_and_need_their_own_statistics(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 6, choices=3)
    outcome = import_file(path, tmp_path / "run", scorers=SAMPLED)
    assert outcome.skipped_scorers == {}
    for record in _by_id(tmp_path / "run").values():
        assert len(record.samples) == 2
        for name in ("semantic_entropy", "mc_entropy", "msp"):
            assert math.isfinite(record.scores[name]), (name, record.score_errors)


# ------------------------------------------------------------- multiple choice


def test_option_probability_hand_computed():
    # l = (-1, -2, -3): p = e^l / sum e^l = (0.665241, 0.244728, 0.090031)
    item = Item("q", "2+2?", metadata={"choices": ["4", "5", "6"],
                                       "choice_loglikelihoods": [-1.0, -2.0, -3.0]})
    spec = SCORERS["option_probability"]
    assert spec.cost is Cost.FREE and spec.needs == {Need.CHOICE_LOGLIKELIHOODS}
    for answer, expected in (("4", 0.665241), ("5", 0.244728), (" 6 ", 0.090031)):
        value, why = run_scorer(spec, Record(item, Generation(text=answer)))
        assert why is None and value == pytest.approx(expected, abs=1e-6)
    one = Item("q", "?", metadata={"choices": ["only"], "choice_loglikelihoods": [-7.0]})
    assert run_scorer(spec, Record(one, Generation(text="only")))[0] == 1.0
    for metadata, reason in (
            ({}, "no options"),
            ({"choices": ["4", "5"], "choice_loglikelihoods": [-1.0]}, "2 options but 1"),
            ({"choices": ["4", "5"], "choice_loglikelihoods": [-1.0, float("nan")]},
             "not finite"),
            ({"choices": ["5", "6"], "choice_loglikelihoods": [-1.0, -2.0]}, "none of")):
        value, why = run_scorer(spec, Record(Item("q", "?", metadata=metadata),
                                             Generation(text="4")))
        assert math.isnan(value) and reason in why


def test_lmeval_multiple_choice_import(tmp_path):
    outcome = import_file(ARC, tmp_path / "run", scorers=["option_probability", "msp",
                                                          "length"])
    assert outcome.format == "lmeval"
    assert outcome.skipped_scorers == {"msp": "imported generations: no token_logprobs in "
                                              "the file"}
    with RunStore.open(tmp_path / "run") as store:
        assert store.config["grader"] == store.config["reference_grader"] == "choice"
        records = store.records()
    for record in records:
        ll = np.asarray(record.item.metadata["choice_loglikelihoods"])
        expected = float(np.exp(ll).max() / np.exp(ll).sum())
        assert record.scores["option_probability"] == pytest.approx(expected, rel=1e-12)
        assert "choice" in record.grades and LABEL_GRADE in record.grades
        assert record.grades["choice"] == record.grades[LABEL_GRADE]  # harness acc agrees


# ------------------------------------------------------------- identity, resume


def test_resume_with_other_settings_is_refused(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 4)
    out = tmp_path / "run"
    import_file(path, out, scorers=["msp"])
    again = import_file(path, out, scorers=["msp"])  # the same: nothing to do
    assert (again.imported, again.resumed, again.total) == (0, 4, 4)
    with pytest.raises(ConfigMismatch, match="scorers"):
        import_file(path, out, scorers=["msp", "length"])
    with pytest.raises(ConfigMismatch, match="grader"):
        import_file(path, out, scorers=["msp"], grader="exact")
    synthetic(path, 4, seed=1)  # other bytes in the same file
    with pytest.raises(ConfigMismatch, match="sha256"):
        import_file(path, out, scorers=["msp"])


def test_interrupted_import_resumes_to_the_uninterrupted_numbers(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 40, choices=2)
    whole = import_file(path, tmp_path / "whole", scorers=SAMPLED, batch_size=7)
    assert whole.total == 40

    def stop_after(n: int):
        def progress(read: int) -> None:
            if read == n:
                raise KeyboardInterrupt
        return progress

    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        import_file(path, out, scorers=SAMPLED, batch_size=7, progress=stop_after(17))
    with RunStore.open(out) as store:
        assert len(store) == 17  # the pending batch was stored before leaving
        assert not store.get_meta("import_complete")
    with pytest.raises(KeyboardInterrupt):  # a second cut, inside the resumed part
        import_file(path, out, scorers=SAMPLED, batch_size=7, progress=stop_after(30))
    resumed = import_file(path, out, scorers=SAMPLED, batch_size=7)
    assert (resumed.resumed, resumed.imported, resumed.total) == (30, 10, 40)
    a, b = _by_id(tmp_path / "whole"), _by_id(out)
    assert sorted(a) == sorted(b)
    with sqlite3.connect(out / "run.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*), COUNT(DISTINCT item_id) FROM records"
                            ).fetchone() == (40, 40)
    for item_id, record in a.items():
        other = b[item_id]
        assert record.scores.keys() == other.scores.keys()
        assert all(_same(v, other.scores[k]) for k, v in record.scores.items())
        assert record.score_errors == other.score_errors and record.grades == other.grades


def test_bad_record_stops_the_import_and_keeps_what_was_stored(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 5)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace('"logprob": -', '"logprob": ', 1)  # a positive log-prob
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    with pytest.raises(InvalidInputError, match=r"s\.jsonl:3: .*logprob"):
        import_file(path, out, scorers=["msp"])
    assert len(RunStore.open(out)) == 2
    done = import_file(path, out, scorers=["msp"], on_bad_record="skip")
    assert (done.resumed, done.imported, done.total) == (2, 2, 4)
    assert done.bad_records and done.bad_records[0][0].endswith("s.jsonl:3")


def test_options_are_checked_before_anything_is_stored(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(InvalidInputError, match="answer"):
        import_file(OPENAI_CHAT, out, answer="last")
    with pytest.raises(InvalidInputError, match="asks a model"):
        import_file(OPENAI_CHAT, out, grader="llm")
    with pytest.raises(KeyError, match="Did you mean"):
        import_file(OPENAI_CHAT, out, scorers=["msq"])
    with pytest.raises(InvalidInputError, match="no such file"):
        import_file(tmp_path / "missing.jsonl", out)
    assert not out.exists()


def test_default_scorer_sets():
    every = import_scorers("all")
    assert "self_certainty" in every and "verbalized_1s" in every
    assert not [n for n in every if Need.TRAINING in SCORERS[n].needs]
    free = import_scorers("free")
    assert {"msp", "mean_entropy", "option_probability", "length"} <= set(free)
    assert all(SCORERS[n].cost is Cost.FREE for n in free)
    assert "self_certainty" not in free


def test_greedy_file_mode(tmp_path):
    samples = tmp_path / "samples.jsonl"
    greedy = tmp_path / "greedy.jsonl"
    samples.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "Rome",
                                   "samples": ["Paris"]}) + "\n", encoding="utf-8")
    greedy.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "Paris",
                                  "token_logprobs": [-0.1], "tokens": ["Paris"]}) + "\n",
                      encoding="utf-8")
    import_file(samples, tmp_path / "run", scorers=["msp", "num_sets"],
                answer="greedy-file", greedy_file=greedy)
    record = _by_id(tmp_path / "run")["a"]
    assert record.greedy.text == "Paris" and [s.text for s in record.samples] == ["Rome",
                                                                                 "Paris"]
    assert record.scores["msp"] == pytest.approx(-0.1)
    with RunStore.open(tmp_path / "run") as store:
        assert store.config["source"]["greedy_file"]["sha256"] == hashlib.sha256(
            greedy.read_bytes()).hexdigest()


# ------------------------------------------------------------- export, round trip


def test_openai_export_is_read_back_by_the_openai_reader(tmp_path):
    gen = Generation(text="Paris", tokens=[" Par", "is"],
                     token_logprobs=np.array([-0.5, -0.125], np.float32),
                     top_logprobs=np.array([[-0.5, -1.5], [-0.125, -3.0]], np.float32),
                     top_tokens=[[" Par", " Rome"], ["is", "it"]])
    record = Record(Item("q1", "Capital?", references=["Paris"]), gen,
                    samples=[Generation(text="Rome")], grades={LABEL_GRADE: 1.0})
    obj = openai_response(record, model="m")
    entry = obj["choices"][0]["logprobs"]["content"][0]
    assert entry == {"token": " Par", "logprob": -0.5, "bytes": list(b" Par"),
                     "top_logprobs": [{"token": " Par", "logprob": -0.5, "bytes": list(b" Par")},
                                      {"token": " Rome", "logprob": -1.5,
                                       "bytes": list(b" Rome")}]}
    assert obj["request"] == {"model": "m", "prompt": "Capital?"} and obj["id"] == "q1"
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(obj) + "\n", encoding="utf-8")
    (back,) = list(read_generations(path))
    assert back.item.id == "q1" and back.item.prompt == "Capital?" and back.label == 1.0
    assert back.greedy.tokens == gen.tokens and back.item.references == ["Paris"]
    assert np.array_equal(back.greedy.token_logprobs, gen.token_logprobs)
    assert np.array_equal(back.greedy.top_logprobs, gen.top_logprobs)
    assert [s.text for s in back.samples] == ["Rome"]


def test_export_cli_openai_and_unknown_format(tmp_path):
    import_file(OPENAI_CHAT, tmp_path / "run", scorers=["msp"])
    target = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "openai",
                                      "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert len(target.read_text(encoding="utf-8").splitlines()) == 2
    bad = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "--format", "xml"])
    assert bad.exit_code == 1 and "openai" in bad.output


# White-box and sampling scorers of the round trip, and what the OpenAI format cannot
# carry: the statistics of the whole next-token distribution.
ROUND_TRIP = ("msp", "mean_logprob", "min_logprob", "mean_entropy", "max_entropy",
              "self_certainty", "fisher_rao", "renyi_negentropy", "length",
              "probability_margin", "mean_topk_negentropy", "min_topk_negentropy",
              "boostedprob", "ccp", "semantic_entropy", "num_sets", "lexical_similarity",
              "mc_entropy", "mc_entropy_normalized", "sar")
NOT_CARRIED = {"self_certainty", "fisher_rao", "renyi_negentropy"}  # skipped on import
# the hf run reads token_boosted_prob (whole distribution), which the OpenAI format cannot
# carry: the import applies the rule to the top-k, equal where that can tell, NaN elsewhere
TOP_K_RULE = {"boostedprob"}
BOUNDS = {"mean_entropy", "max_entropy"}  # entropies come back as lower bounds


def test_openai_export_round_trip(tmp_path, hf_model):
    from confide.pipeline.plan import RunConfig
    from confide.runs.execution import execute

    run = tmp_path / "model-run"
    execute(RunConfig(task="triviaqa", limit=4, max_new_tokens=8, n_samples=2,
                      scorers=ROUND_TRIP), run, backend=hf_model)
    with RunStore.open(run) as store:
        exported = export_run(store, "openai", tmp_path / "run.openai.jsonl")
    outcome = import_file(exported, tmp_path / "imported", scorers=ROUND_TRIP)
    assert set(outcome.skipped_scorers) == NOT_CARRIED
    assert set(outcome.approximate) == {"token_entropies"}
    a, b = _by_id(run), _by_id(tmp_path / "imported")
    assert sorted(a) == sorted(b)
    equal, differ = set(), set()
    for item_id, original in a.items():
        back = b[item_id]
        assert back.grades == original.grades
        assert back.greedy.text == original.greedy.text
        assert [s.text for s in back.samples] == [s.text for s in original.samples]
        for name in ROUND_TRIP:
            if name in NOT_CARRIED:
                assert name not in back.scores
                continue
            if name in TOP_K_RULE:
                assert original.greedy.token_boosted_prob is not None
                assert back.greedy.token_boosted_prob is None
                assert math.isnan(back.scores[name]) or _same(
                    original.scores[name], back.scores[name], 1e-6)
                continue
            (equal if _same(original.scores[name], back.scores[name], 1e-9) else
             differ).add(name)
            if name in BOUNDS and not math.isnan(original.scores[name]):
                # -H_lower >= -H: a lower bound of the entropy is an upper bound of c
                assert back.scores[name] >= original.scores[name] - 1e-6
    assert differ <= BOUNDS and BOUNDS & differ
    assert equal == set(ROUND_TRIP) - NOT_CARRIED - TOP_K_RULE - differ


def _stored(run: Path) -> dict[str, tuple[int, str]]:
    with sqlite3.connect(run / "run.sqlite") as conn:
        return {i: (p, d) for p, i, d in conn.execute("SELECT position, item_id, data "
                                                       "FROM records")}


def test_worker_processes_store_what_one_process_stores(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 30, choices=2)
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[0] = "42"  # bad before the first good record too
    lines[4] = "{not json"
    lines.insert(9, lines[7])  # a duplicate id
    lines.insert(12, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    one = import_file(path, tmp_path / "one", scorers=SAMPLED, on_bad_record="skip",
                      workers=1)
    two = import_file(path, tmp_path / "two", scorers=SAMPLED, on_bad_record="skip",
                      workers=2)
    assert one.total == two.total == 28
    assert one.bad_records == two.bad_records and len(one.bad_records) == 3
    assert _stored(tmp_path / "one") == _stored(tmp_path / "two")
    lines[0] = lines[1].replace('"q1"', '"q0"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"s\.jsonl:5: record: malformed JSON"):
        import_file(path, tmp_path / "three", scorers=SAMPLED, workers=2)
    with RunStore.open(tmp_path / "three") as store:
        assert len(store) == 4  # the records before it are kept


def test_interrupted_import_in_workers_resumes(tmp_path):
    path = synthetic(tmp_path / "s.jsonl", 600, choices=1)

    def stop(read: int) -> None:
        if read == 300:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_file(path, tmp_path / "cut", scorers=["msp", "length"], workers=2,
                    progress=stop)
    assert len(RunStore.open(tmp_path / "cut")) == 300
    resumed = import_file(path, tmp_path / "cut", scorers=["msp", "length"], workers=2)
    assert (resumed.resumed, resumed.imported) == (300, 300)
    whole = tmp_path / "whole"
    import_file(path, whole, scorers=["msp", "length"], workers=1)
    assert {k: json.loads(v)["scores"] for k, (_, v) in _stored(whole).items()} == {
        k: json.loads(v)["scores"] for k, (_, v) in _stored(tmp_path / "cut").items()}


def test_ungraded_import_says_how_to_label(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Q?", "answer": "Paris"}) + "\n",
                    encoding="utf-8")
    result = CliRunner().invoke(app, ["score", str(path), "--out", str(tmp_path / "run"),
                                      "--scorers", "msp,length,verbalized_1s"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())  # Rich wraps long lines
    assert "as jsonl (detected: 'question' and a text 'answer'" in shown
    assert "no log-probabilities" in shown
    assert "skipped verbalized_1s: needs the model" in shown
    assert "confide label" in shown
    bad = CliRunner().invoke(app, ["score", str(path), "--out", str(tmp_path / "run2"),
                                   "--format", "lmeval"])
    assert bad.exit_code == 1 and "plain.jsonl:1" in "".join(bad.output.split())
