"""Ensemble members as part of a run: a 2-member LoRA ensemble (of the top 8 layers, the
default; and of every layer) trained in the test scores every answer of a real TriviaQA run
by teacher forcing; resume refuses other members; an imported JSON Lines file with
per-member log-probabilities feeds the sequence scorers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from confide.backends.base import GenerationSpec  # noqa: E402
from confide.backends.hf.ensemble import member_arrays  # noqa: E402
from confide.core.errors import ConfigMismatch, InvalidInputError  # noqa: E402
from confide.learned.training import train_members  # noqa: E402
from confide.pipeline.plan import RunConfig, prepare  # noqa: E402
from confide.runs.execution import execute  # noqa: E402
from confide.runs.importing import import_file  # noqa: E402
from confide.scorers.ensemble import member_statistics, sequence_rmi, sequence_total  # noqa: E402
from confide.store.run_store import RunStore  # noqa: E402

QA = [("What is the capital of France?", "Paris"), ("How many legs has a spider?", "8"),
      ("Which planet is called the red planet?", "Mars"),
      ("Who wrote Hamlet?", "William Shakespeare")]
SCORERS = ("msp", "ens_total_entropy", "ens_expected_entropy", "ens_mutual_information",
           "ens_seq_total_pe", "ens_seq_total_ep", "ens_seq_rmi_pe", "ens_seq_rmi_ep",
           "ens_seq_mutual_information")


pytestmark = pytest.mark.usefixtures("one_thread")


def _train(model, folder: Path, data: Path, steps: int, layers: str | None = None):
    # a large learning rate: two steps move the members apart enough to disagree
    return train_members(model, data, out=folder, method="lora", members=2, steps=steps,
                         batch_size=2, lr=5e-3, seed=0, layers=layers,
                         task_options={"reference_field": "answer", "num_fewshot": 0})


@pytest.fixture(scope="module")
def trained(model32, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ens")
    data = folder / "qa.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QA))
    _train(model32, folder / "lora", data, steps=2)
    return folder


def _config(ensemble: Path, **kw) -> RunConfig:
    return RunConfig(task="triviaqa", limit=3, n_samples=2, scorers=SCORERS,
                     ensemble=str(ensemble), batch_size=4, **kw)


@pytest.fixture(scope="module")
def run(model32, trained, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    outcome = execute(_config(trained / "lora"), out, backend=model32)
    assert outcome.generated == 3 and not outcome.skipped_scorers
    return out


def _records(path: Path):
    with RunStore.open(path) as store:
        return list(store.records())


def test_run_records_members_on_greedy_and_samples(run):
    records = _records(run)
    assert len(records) == 3
    for record in records:
        assert len(record.samples) == 2
        for gen in [record.greedy, *record.samples]:
            stats = gen.members
            assert stats is not None and stats.method == "lora"
            assert stats.logprobs.shape == (2, gen.n_tokens)
            assert stats.entropies.shape == (2, gen.n_tokens)
            assert stats.mean_entropy.shape == stats.mean_cross_entropy.shape == (gen.n_tokens,)
        for name in SCORERS:
            assert math.isfinite(record.scores[name]), (name, record.score_errors.get(name))
        # total = aleatoric + epistemic, in confidence too
        assert record.scores["ens_total_entropy"] == pytest.approx(
            record.scores["ens_expected_entropy"] + record.scores["ens_mutual_information"])
    # the trained members disagree somewhere: mutual information is not all 0
    assert max(-r.scores["ens_mutual_information"] for r in records) > 1e-6
    with RunStore.open(run) as store:  # the run's settings name the members
        assert store.config["ensemble_members"]["method"] == "lora"
        assert set(store.config["ensemble_members"]["files"]) == {"member-0.safetensors",
                                                                  "member-1.safetensors"}


def _alone(model32, ids: list[int], member: int) -> torch.Tensor:
    """Member ``member``'s log-probabilities over one unpadded row, run alone."""
    x = torch.tensor([ids])
    mask = torch.ones_like(x)
    with torch.inference_mode(), model32.ensemble.members.layers.rows([member]):
        hidden = model32.model.get_decoder()(
            input_ids=x, attention_mask=mask, position_ids=torch.arange(len(ids))[None],
            use_cache=False).last_hidden_state
        return torch.log_softmax(model32.float32_logits(hidden), -1)[0]


def test_teacher_forced_statistics_match_each_member_alone(model32, trained, run):
    """Batched over the block's answers and members, with the shared few-shot prefix
    cached per member, each member's log-probabilities equal that member run alone over
    prompt + answer; the entropies equal member_statistics of those distributions."""
    model32.use_ensemble(trained / "lora")
    plan = prepare(_config(trained / "lora"))
    for record in _records(run)[:2]:
        for gen in [record.greedy, record.samples[1]]:
            prompt = model32.encode(plan.task.render(record.item, chat=False))
            answer = list(gen.token_ids)
            full = []
            for m in range(2):
                logp = _alone(model32, prompt + answer, m)
                steps = logp[len(prompt) - 1:len(prompt) - 1 + len(answer)]
                full.append(steps.numpy())
                chosen = steps.gather(-1, torch.tensor(answer)[:, None])[:, 0].numpy()
                np.testing.assert_allclose(gen.members.logprobs[m], chosen, atol=1e-4)
            expected = member_statistics(np.stack(full), answer)
            np.testing.assert_allclose(gen.members.entropies, expected.entropies, atol=1e-4)
            np.testing.assert_allclose(gen.members.mean_entropy, expected.mean_entropy,
                                       atol=1e-4)
            np.testing.assert_allclose(gen.members.mean_cross_entropy,
                                       expected.mean_cross_entropy, atol=1e-4)


def test_members_of_every_layer_teacher_force_as_alone(model32, trained, run):
    """Members of all 30 layers (no shared lower layers: the whole batch and the few-shot
    prefix repeated per member) give each member's statistics as run alone too."""
    model32.use_ensemble(None)  # training attaches its own members
    _train(model32, trained / "all", trained / "qa.jsonl", steps=2, layers="all")
    model32.use_ensemble(trained / "all")
    assert model32.ensemble.members.split == 0
    plan = prepare(_config(trained / "all"))
    records = _records(run)[:2]
    prompts = [model32.encode(plan.task.render(r.item, chat=False)) for r in records]
    answers = [(q, list(r.greedy.token_ids)) for q, r in enumerate(records)]
    stats = model32.ensemble.teacher_force(prompts, answers)
    for (q, answer), got in zip(answers, stats, strict=True):
        for m in range(2):
            logp = _alone(model32, prompts[q] + answer, m)
            steps = logp[len(prompts[q]) - 1:len(prompts[q]) - 1 + len(answer)]
            chosen = steps.gather(-1, torch.tensor(answer)[:, None])[:, 0].numpy()
            np.testing.assert_allclose(got.logprobs[m], chosen, atol=1e-4)
    model32.use_ensemble(None)


def test_member_arrays_equal_member_statistics(rng):
    """The chunk-wise torch sums give member_statistics' values (hand-made distributions,
    one with a probability 0)."""
    logits = rng.normal(size=(3, 2, 4, 7))
    logits[0, 1, 2, 3] = -np.inf
    logp = torch.log_softmax(torch.tensor(logits, dtype=torch.float32), -1)
    ids = torch.tensor([[0, 6, 2, 1], [3, 3, 4, 5]])
    lp, ent, mean_ent, mean_ce = member_arrays(logp, ids)
    for r in range(2):
        ref = member_statistics(logp[:, r].double().numpy(), ids[r].tolist())
        np.testing.assert_allclose(lp[:, r], ref.logprobs, atol=1e-5)
        np.testing.assert_allclose(ent[:, r], ref.entropies, atol=1e-5)
        np.testing.assert_allclose(mean_ent[r], ref.mean_entropy, atol=1e-5)
        if r == 0:  # a member's probability 0 makes the cross-entropy infinite in both
            assert np.isinf(ref.mean_cross_entropy[2]) == np.isinf(mean_ce[r][2])
            continue
        np.testing.assert_allclose(mean_ce[r], ref.mean_cross_entropy, atol=1e-5)


def test_resume_keeps_the_same_ensemble_and_refuses_a_changed_one(model32, trained, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(trained / "lora", copy)
    out = tmp_path / "run"
    config = RunConfig(task="triviaqa", limit=1, scorers=("msp", "ens_mutual_information"),
                       ensemble=str(copy), batch_size=1)
    assert execute(config, out, backend=model32).generated == 1
    assert execute(config, out, backend=model32).generated == 0  # resumed: nothing to do
    model32.use_ensemble(None)  # training attaches its own members
    _train(model32, copy, trained / "qa.jsonl", steps=3)  # one step more: other weights
    with pytest.raises(ConfigMismatch, match="ensemble_members.*files"):
        execute(config, out, backend=model32)


def test_a_run_without_an_ensemble_detaches_an_earlier_runs_members(model32, trained,
                                                                     tmp_path):
    config = RunConfig(task="triviaqa", limit=1, scorers=("msp", "ens_mutual_information"),
                       ensemble=str(trained / "lora"), batch_size=1)
    execute(config, tmp_path / "with", backend=model32)
    assert model32.ensemble is not None
    plain = RunConfig(task="triviaqa", limit=1, scorers=("msp",), batch_size=1)
    execute(plain, tmp_path / "without", backend=model32)
    assert model32.ensemble is None
    with RunStore.open(tmp_path / "without") as store:
        (record,) = list(store.records())
    assert record.greedy.members is None


def test_run_config_refuses_ensembles_it_cannot_use(tmp_path):
    with pytest.raises(InvalidInputError, match="hf backend only"):
        RunConfig(backend="vllm", ensemble=str(tmp_path))
    with pytest.raises(InvalidInputError, match="needs an ensemble"):
        RunConfig(ensemble_greedy="mean")
    with pytest.raises(InvalidInputError, match="ensemble_greedy"):
        RunConfig(ensemble=str(tmp_path), ensemble_greedy="median")
    with pytest.raises(InvalidInputError, match="ensemble.json.*confide train"):
        prepare(RunConfig(ensemble=str(tmp_path / "none"), limit=1))
    # without an ensemble the stored settings are those of before (old runs resume)
    assert "ensemble" not in RunConfig().to_dict()


def test_mean_greedy_is_the_argmax_of_the_members_mean(model32, trained):
    model32.use_ensemble(trained / "lora", greedy="mean")
    assert model32.config()["ensemble"]["greedy"] == "mean"
    spec = GenerationSpec(max_new_tokens=6, n_samples=1, stop=("\n",))
    prompts = ["Question: What is the capital of Italy?\nAnswer:",
               "Question: Who wrote Faust?\nAnswer:"]
    results = model32.generate(prompts, spec, [1, 2])
    for prompt, result in zip(prompts, results, strict=True):
        gen = result.greedy
        assert gen.members is not None and gen.members.logprobs.shape == (2, gen.n_tokens)
        assert len(result.samples) == 1 and result.samples[0].members is not None
        # the answer's token statistics are those of the mean: log p̄(y_t)
        mean = np.logaddexp.reduce(gen.members.logprobs, axis=0) - math.log(2)
        np.testing.assert_allclose(gen.token_logprobs, mean, atol=1e-4)
        # each token is the mean's argmax: teacher forcing it gives the same statistics
        again = model32.ensemble.teacher_force([model32.encode(prompt)],
                                               [(0, list(gen.token_ids))])[0]
        np.testing.assert_allclose(again.logprobs, gen.members.logprobs, atol=1e-4)
        ids = model32.encode(prompt) + list(gen.token_ids)
        for t in range(gen.n_tokens):
            p = sum(_alone(model32, ids, m)[len(ids) - gen.n_tokens - 1 + t].exp()
                    for m in range(2))
            assert int(p.argmax()) == gen.token_ids[t]
    model32.use_ensemble(None)
    assert model32.ensemble is None and "ensemble" not in model32.config()


def test_import_with_member_logprobs_feeds_the_sequence_scorers(tmp_path):
    samples_a = [[[-0.1, -0.5], [-0.3, -0.2]], [[-1.0], [-2.0]]]
    rows = [{"id": "a", "question": "Capital of France?", "answer": "Paris",
             "token_logprobs": [-0.2, -0.1], "member_logprobs": [[-0.1, -0.2], [-0.4, -0.1]],
             "samples": [{"answer": "Paris", "token_logprobs": [-0.1, -0.4],
                          "member_logprobs": samples_a[0]},
                         {"answer": "Lyon", "token_logprobs": [-1.5],
                          "member_logprobs": samples_a[1]}],
             "references": ["Paris"]},
            {"id": "b", "question": "2 + 2?", "answer": "4", "token_logprobs": [-0.3],
             "member_logprobs": [[-0.3], [-0.3]],
             "samples": [{"answer": "4", "token_logprobs": [-0.3],
                          "member_logprobs": [[-0.3], [-0.3]]}],
             "references": ["5"]}]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = "ens_seq_total_pe,ens_seq_total_ep,ens_seq_rmi_pe,ens_seq_rmi_ep,ens_mutual_information"
    outcome = import_file(log, tmp_path / "run", format="jsonl", scorers=names)
    assert "ens_mutual_information" in outcome.skipped_scorers  # needs whole distributions
    with RunStore.open(tmp_path / "run") as store:
        got = {r.item.id: r for r in store.records()}
    a = got["a"]
    arrays = [np.array(s) for s in samples_a]
    assert a.scores["ens_seq_total_pe"] == pytest.approx(-sequence_total(arrays, "pe"))
    assert a.scores["ens_seq_rmi_ep"] == pytest.approx(-sequence_rmi(arrays, "ep"))
    # by hand, sample 2 ("Lyon"): PE log P = log((e^-1 + e^-2) / 2) over 1 token
    pe2 = math.log((math.exp(-1) + math.exp(-2)) / 2)
    pe1 = (math.log((math.exp(-0.1) + math.exp(-0.3)) / 2)
           + math.log((math.exp(-0.5) + math.exp(-0.2)) / 2)) / 2
    assert a.scores["ens_seq_total_pe"] == pytest.approx((pe1 + pe2) / 2)
    assert got["b"].scores["ens_seq_rmi_pe"] == pytest.approx(0.0)  # members agree


def test_import_names_line_and_field_of_bad_member_logprobs(tmp_path):
    log = tmp_path / "log.jsonl"
    good = {"question": "q?", "answer": "x", "token_logprobs": [-0.1]}
    bad = {**good, "member_logprobs": [[-0.1], [-0.2, -0.3]]}
    log.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(InvalidInputError, match=r"log.jsonl:2.*member_logprobs\[1\]"):
        import_file(log, tmp_path / "run", format="jsonl", scorers="ens_seq_total_pe")
