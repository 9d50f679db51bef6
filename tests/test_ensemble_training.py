"""Ensemble members: LoRA and SVE trained for a few steps on the bundled model, MC dropout
passes, the member files, resuming after SIGKILL, and a wrong base model refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from confide.backends.hf.members import (  # noqa: E402
    ENSEMBLE_FILE,
    EnsembleMembers,
    base_fingerprint,
    check_base,
    member_file,
    read_ensemble,
)
from confide.core.errors import ConfigMismatch, InvalidInputError  # noqa: E402
from confide.learned.training import batch_indices, train_members  # noqa: E402

QA = [("What is the capital of France?", "Paris"), ("How many legs has a spider?", "8"),
      ("Which planet is called the red planet?", "Mars"),
      ("Who wrote Hamlet?", "William Shakespeare"), ("What is frozen water called?", "Ice"),
      ("Which gas do plants take in?", "Carbon dioxide")]
# Zero-shot prompts keep the rows short: a training step takes well under a second.
OPTIONS = {"reference_field": "answer", "num_fewshot": 0}


# SVE decomposes each target weight when attached; two layers (within the default top 8
# of 30) keep the tests quick.
SVE_TARGETS = ("layers.28.self_attn.q_proj", "layers.28.self_attn.v_proj",
               "layers.29.self_attn.q_proj", "layers.29.self_attn.v_proj")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def qa_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("qa") / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QA))
    return path


def _batch(model):
    enc = model.tokenizer(["Question: Who painted the Mona Lisa?\nAnswer:",
                           "Question: What is 2 + 2?\nAnswer:"], return_tensors="pt",
                          padding=True)
    return enc["input_ids"], enc["attention_mask"]


def _base_logits(model, ids, mask):
    with torch.inference_mode():
        hidden = model.model.get_decoder()(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=False).last_hidden_state
        return model.float32_logits(hidden)


def _train(model, qa_file, out, **kw):
    settings = {"method": "lora", "members": 2, "steps": 2, "batch_size": 2, "seed": 0,
                "task_options": OPTIONS, **kw}
    return train_members(model, qa_file, out=out, **settings)


@pytest.fixture(scope="module")
def lora_dir(model32, qa_file, tmp_path_factory) -> Path:
    """Two LoRA members trained for two steps (shared by the tests that only read them)."""
    out = tmp_path_factory.mktemp("lora") / "ens"
    info = _train(model32, qa_file, out)
    assert info.steps_done == 2 and len(info.loss_curve) == 2 and len(info.loss_curve[0]) == 2
    return out


def test_lora_members_trained_saved_reloaded_and_differ(model32, lora_dir):
    ids, mask = _batch(model32)
    before = _base_logits(model32, ids, mask)
    stored = read_ensemble(lora_dir)
    assert stored.base["fingerprint"] == base_fingerprint(model32.model)
    assert stored.data["sha256"] and stored.data["items"] == len(QA)
    assert stored.member_seeds[0] != stored.member_seeds[1]
    # the members' files hold their adapters only: rank 8 on q_proj and v_proj
    sizes = stored.sizes
    n_params = sum(p.numel() for p in model32.model.parameters())
    assert sizes[member_file(0)] < 0.01 * 4 * n_params
    with EnsembleMembers.load(lora_dir, model32) as ens:
        assert (ens.count, ens.method) == (2, "lora")
        logits = ens.forward_all(ids, mask)
        assert logits.shape == (2, *ids.shape, before.shape[-1])
        assert (logits[0] - logits[1]).abs().max() > 1e-3  # different seeds and data orders
        assert (logits[0] - before).abs().max() > 1e-3  # and trained away from the base
        # attached members leave the backend's own passes as they were
        assert torch.equal(_base_logits(model32, ids, mask), before)
        # start= keeps only the later positions
        assert torch.allclose(ens.forward_all(ids, mask, start=3), logits[:, :, 3:], atol=1e-4)
    assert torch.equal(_base_logits(model32, ids, mask), before)  # removed again


def test_forward_all_rows_match_one_member_alone(model32, lora_dir):
    """The expanded batch routes each block to its member: member 1 over the batch alone
    gives the same logits as block 1 of the all-members pass."""
    ids, mask = _batch(model32)
    with EnsembleMembers.load(lora_dir, model32) as ens:
        together = ens.forward_all(ids, mask)
        decoder = model32.model.get_decoder()
        with torch.inference_mode(), ens.layers.rows([1]):
            alone = model32.float32_logits(decoder(
                input_ids=ids, attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0), use_cache=False
            ).last_hidden_state)
    assert torch.allclose(together[1], alone, atol=1e-4)


def test_sve_members_start_as_the_base_and_files_are_small(model32, qa_file, tmp_path):
    ids, mask = _batch(model32)
    before = _base_logits(model32, ids, mask)
    _train(model32, qa_file, tmp_path / "init", method="sve", steps=0, targets=SVE_TARGETS)
    with EnsembleMembers.load(tmp_path / "init", model32) as ens:  # s_m = s: the base exactly
        assert torch.allclose(ens.forward_all(ids, mask), before.expand(2, -1, -1, -1),
                              atol=1e-4)
    info = _train(model32, qa_file, tmp_path / "sve", method="sve", steps=1,
                  targets=SVE_TARGETS)
    # 2 layers x (576 + 192) singular values in float32, plus the safetensors header
    assert 2 * 768 * 4 <= info.sizes[member_file(0)] < 2 * 768 * 4 + 2_000
    with EnsembleMembers.load(tmp_path / "sve", model32) as ens:
        logits = ens.forward_all(ids, mask)
        assert (logits[0] - logits[1]).abs().max() > 1e-4  # different batches
        assert (logits[0] - before).abs().max() > 1e-4
    assert torch.equal(_base_logits(model32, ids, mask), before)


def test_mc_dropout_passes_differ_and_repeat_under_a_seed(model32, qa_file, tmp_path):
    ids, mask = _batch(model32)
    info = _train(model32, qa_file, tmp_path / "mc", method="mc-dropout", members=3)
    assert info.steps_done == 0 and info.files == {} and info.settings["dropout"] == 0.1
    with EnsembleMembers.load(tmp_path / "mc", model32) as ens:
        first = ens.forward_all(ids, mask)
        assert first.shape[0] == 3
        assert (first[0] - first[1]).abs().max() > 1e-2 and (first[1] - first[2]).abs().max() > 1e-2
        assert torch.equal(ens.forward_all(ids, mask), first)  # the masks are fixed
        # a pass does not depend on its batch: row 0 alone gives the same logits
        assert torch.allclose(ens.forward_all(ids[:1], mask[:1])[:, 0], first[:, 0], atol=1e-4)
    with EnsembleMembers.load(tmp_path / "mc", model32) as ens:
        assert torch.equal(ens.forward_all(ids, mask), first)  # reloaded: the same passes
    _train(model32, qa_file, tmp_path / "mc1", method="mc-dropout", members=3, seed=1)
    with EnsembleMembers.load(tmp_path / "mc1", model32) as ens:
        assert not torch.equal(ens.forward_all(ids, mask), first)


def test_wrong_base_model_refused(model32, qa_file, lora_dir):
    weight = model32.model.model.layers[3].self_attn.q_proj.weight
    kept = weight.detach().clone()
    with torch.no_grad():
        weight.add_(0.01)  # a fine-tuned copy of the base: same config, other weights
    try:
        with pytest.raises(ConfigMismatch, match="fingerprint"):
            EnsembleMembers.load(lora_dir, model32)
        with pytest.raises(ConfigMismatch, match="base_fingerprint"):  # resuming refused too
            _train(model32, qa_file, lora_dir, steps=3)
    finally:
        with torch.no_grad():
            weight.copy_(kept)
    assert not hasattr(model32.model, "_confide_members")  # nothing left attached
    from transformers import AutoModelForCausalLM

    config = model32.model.config.__class__(**{**model32.model.config.to_dict(),
                                               "num_hidden_layers": 1, "hidden_size": 64,
                                               "intermediate_size": 128,
                                               "num_attention_heads": 2,
                                               "num_key_value_heads": 1, "head_dim": 32})
    other = AutoModelForCausalLM.from_config(config)
    with pytest.raises(ConfigMismatch, match="trained on base model 'smollm2'"):
        check_base(read_ensemble(lora_dir), other)
    EnsembleMembers.load(lora_dir, model32).close()  # the weight restored: accepted


def test_resume_with_other_settings_lists_the_differences(model32, qa_file, lora_dir):
    with pytest.raises(ConfigMismatch, match=r"(?s)lr: 0.0002 → 0.001.*rank: 8 → 4"):
        _train(model32, qa_file, lora_dir, steps=3, lr=1e-3, rank=4)
    assert read_ensemble(lora_dir).steps_done == 2  # untouched


def test_bad_training_input_names_the_field(model32, qa_file, tmp_path):
    with pytest.raises(InvalidInputError, match="offset: offset 6 leaves no item"):
        _train(model32, qa_file, tmp_path / "e", offset=6)
    with pytest.raises(InvalidInputError, match="method"):
        _train(model32, qa_file, tmp_path / "e", method="bagging")
    with pytest.raises(InvalidInputError, match="triviaqa.*give the full data file"):
        train_members(model32, task="triviaqa", offset=1000, out=tmp_path / "e")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / ENSEMBLE_FILE).write_text('{"format": "confide-ensemble"}')
    with pytest.raises(InvalidInputError, match="ensemble.json: version"):
        EnsembleMembers.load(tmp_path / "bad", model32)


@pytest.fixture(scope="module")
def all_dir(model32, qa_file, tmp_path_factory) -> Path:
    """Two LoRA members of every decoder layer (today's path: the whole batch repeated)."""
    out = tmp_path_factory.mktemp("all") / "ens"
    assert _train(model32, qa_file, out, layers="all").settings["layers"] == "all"
    return out


def _statistics(logits, ids):
    """member_arrays of (M, B, T, V) logits: the answer tokens are the next tokens."""
    from confide.backends.hf.ensemble import member_arrays

    logp = torch.log_softmax(logits[:, :, :-1], dim=-1)
    return member_arrays(logp, ids[:, 1:])


def _alone(model, ens, m, ids, mask):
    with torch.inference_mode(), ens.layers.rows([m]):
        return model.float32_logits(model.model.get_decoder()(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
            use_cache=False).last_hidden_state)


def test_top_layer_members_share_the_lower_layers_and_match_each_member_alone(
        model32, lora_dir, qa_file, tmp_path):
    """Members of the top 8 of 30 layers (the default): the file holds those layers only,
    the pass runs the lower 22 once for both members, and every member's token statistics
    equal that member run alone over the batch (float32, within 1e-5)."""
    stored = read_ensemble(lora_dir)
    assert stored.settings["layers"] == "top-8"
    from safetensors.torch import load_file

    names = load_file(lora_dir / member_file(0)).keys()
    assert {int(n.split("layers.")[1].split(".")[0]) for n in names} == set(range(22, 30))
    ids, mask = _batch(model32)
    for folder in (lora_dir, _train(model32, qa_file, tmp_path / "sve", method="sve",
                                    steps=1, targets=SVE_TARGETS, layers="top-2").path):
        with EnsembleMembers.load(folder, model32) as ens:
            assert ens.split == (22 if folder == lora_dir else 28)
            stats = _statistics(ens.forward_all(ids, mask), ids)
            for m in range(2):
                alone = _statistics(_alone(model32, ens, m, ids, mask)[None], ids)
                for together, one in zip(stats, alone, strict=True):
                    if together.ndim == 3:  # per member: (M, B, T)
                        np.testing.assert_allclose(together[m], one[0], atol=1e-5)
            assert np.abs(stats[0][0] - stats[0][1]).max() > 1e-4  # the members differ


@pytest.mark.parametrize("which", ["top", "all"])
def test_forward_all_chunks_give_the_unchunked_statistics(model32, lora_dir, all_dir, which):
    ids, mask = _batch(model32)
    ids, mask = ids.repeat(3, 1), mask.repeat(3, 1)  # 6 rows
    with EnsembleMembers.load(lora_dir if which == "top" else all_dir, model32) as ens:
        whole = ens.forward_all(ids, mask)
        one_row = ens.forward_all(ids, mask, max_tokens=1)  # a row a pass
        two_rows = ens.forward_all(ids, mask, max_tokens=2 * 2 * ids.shape[1] + 1)
    assert whole.shape == one_row.shape == two_rows.shape == (2, 6, ids.shape[1],
                                                              whole.shape[-1])
    for chunked in (one_row, two_rows):
        for a, b in zip(_statistics(whole, ids), _statistics(chunked, ids), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)


def test_members_of_different_layers_are_refused(model32, lora_dir, all_dir, tmp_path):
    """A member file of an all-layer ensemble copied into a top-8 one (its sha256 written
    into ensemble.json) is refused by name, not loaded halfway."""
    import hashlib
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(lora_dir, mixed)
    shutil.copy(all_dir / member_file(1), mixed / member_file(1))
    raw = json.loads((mixed / ENSEMBLE_FILE).read_text())
    raw["files"][member_file(1)] = hashlib.sha256(
        (mixed / member_file(1)).read_bytes()).hexdigest()
    (mixed / ENSEMBLE_FILE).write_text(json.dumps(raw))
    with pytest.raises(InvalidInputError, match=r"settings.layers: the members adapt different "
                       r"decoder layers \(member-0.safetensors: top-8, member-1.safetensors: "
                       r"all; ensemble.json: top-8\).*same layers"):
        EnsembleMembers.load(mixed, model32)
    assert not hasattr(model32.model, "_confide_members")


def test_layers_round_trip_and_resume(model32, qa_file, all_dir, tmp_path):
    out = tmp_path / "top3"
    info = _train(model32, qa_file, out, steps=1, layers=3)
    assert info.settings["layers"] == read_ensemble(out).settings["layers"] == "top-3"
    with EnsembleMembers.load(out, model32) as ens:
        assert ens.split == 27 and ens.layers.adapted == [27, 28, 29]
        assert ens.provenance["settings"]["layers"] == "top-3"
    resumed = _train(model32, qa_file, out, steps=2)  # no layers: as trained
    assert resumed.steps_done == 2 and resumed.settings["layers"] == "top-3"
    with pytest.raises(ConfigMismatch, match="layers: 'top-3' → 'all'"):
        _train(model32, qa_file, out, steps=3, layers="all")
    # an ensemble written before the option (no layers in its settings) adapts all layers
    old = tmp_path / "old"
    import shutil

    shutil.copytree(all_dir, old)
    raw = json.loads((old / ENSEMBLE_FILE).read_text())
    del raw["settings"]["layers"]
    (old / ENSEMBLE_FILE).write_text(json.dumps(raw))
    with EnsembleMembers.load(old, model32) as ens:
        assert ens.split == 0 and ens.layers.adapted is None
    for bad in ("top-0", "top-31", "middle", 0):
        with pytest.raises(InvalidInputError, match="layers:"):
            _train(model32, qa_file, tmp_path / "bad", layers=bad)


def test_batch_indices_cover_each_epoch_once_per_member():
    seen = [i for s in range(3) for i in batch_indices(6, 2, data_seed=0, member=0, step=s)]
    assert sorted(seen) == list(range(6))
    assert seen != [i for s in range(3)
                    for i in batch_indices(6, 2, data_seed=0, member=1, step=s)]


CHILD = textwrap.dedent("""
    import sys, time
    import torch
    from confide.backends.hf import HFBackend

    torch.set_num_threads(1)  # as the tests: the same sums in the same order
    from confide.learned.training import train_members

    model = HFBackend("smollm2", dtype="float32")

    def progress(done, total, loss):
        print(done, flush=True)
        if done == 3:  # past the checkpoint of step 2: wait here to be killed
            time.sleep(600)

    train_members(model, sys.argv[1], out=sys.argv[2], method="lora", members=2, steps=4,
                  batch_size=1, checkpoint_every=2,
                  task_options={"reference_field": "answer", "num_fewshot": 0},
                  progress=progress)
""")


def test_training_resumes_after_sigkill_with_the_same_weights(model32, qa_file, tmp_path):
    from safetensors.torch import load_file

    script = tmp_path / "child.py"
    script.write_text(CHILD)
    killed = tmp_path / "killed"
    child = subprocess.Popen([sys.executable, str(script), str(qa_file), str(killed)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        lines = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = child.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.strip() == "3":
                break
        assert lines[-1:] == ["3"], f"the child stopped early: {lines}"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert read_ensemble(killed).steps_done == 2  # step 3 was never saved
    settings = {"steps": 4, "checkpoint_every": 2, "batch_size": 1}
    resumed = _train(model32, qa_file, killed, **settings)
    straight = _train(model32, qa_file, tmp_path / "straight", **settings)
    assert resumed.steps_done == straight.steps_done == 4
    assert resumed.loss_curve == straight.loss_curve
    for m in range(2):
        a, b = (load_file(d / member_file(m)) for d in (killed, tmp_path / "straight"))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_answer_loss_decreases_over_eight_steps(model32, qa_file, tmp_path):
    info = _train(model32, qa_file, tmp_path / "fit", members=1, steps=8, lr=2e-3,
                  limit=2, checkpoint_every=8)
    losses = [row[0] for row in info.loss_curve]
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:3]) / 3


def test_cli_train_mc_dropout_writes_the_ensemble(qa_file, tmp_path):
    from typer.testing import CliRunner

    from confide.cli import app

    out = tmp_path / "mc"
    result = CliRunner().invoke(app, ["train", "smollm2", "--method", "mc-dropout",
                                      "--members", "3", "--data", str(qa_file),
                                      "--reference-field", "answer", "--out", str(out),
                                      "--dtype", "float32"])
    assert result.exit_code == 0, result.output
    assert "3 mc-dropout member(s)" in result.output and "layers top-8" in result.output
    assert read_ensemble(out).count == 3
    result = CliRunner().invoke(app, ["train", "smollm2", "--method", "mc-dropout",
                                      "--members", "2", "--data", str(qa_file), "--layers",
                                      "top-2", "--reference-field", "answer", "--out",
                                      str(tmp_path / "mc2"), "--dtype", "float32"])
    assert result.exit_code == 0 and read_ensemble(tmp_path / "mc2").settings["layers"] == \
        "top-2", result.output
    result = CliRunner().invoke(app, ["train", "smollm2", "--method", "mc-dropout",
                                      "--members", "4", "--data", str(qa_file),
                                      "--reference-field", "answer", "--out", str(out),
                                      "--dtype", "float32"])
    assert result.exit_code == 1 and "members: 3 → 4" in result.output
