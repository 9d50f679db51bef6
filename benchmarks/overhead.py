"""Overhead of confide's pipeline over bare transformers generation, greedy and sampled.

In one process, on the default model and N bundled TriviaQA items, for each
path (``greedy``: one answer per question; ``sampled``: the greedy answer plus
k samples at temperature 1, top-p 0.9, as the sampling scorers need):

1. bare: ``model.generate`` on the same prompts in the same blocks of
   ``batch_size`` questions, same stop string and token budget, no statistics
   (sampled: a greedy call, then ``do_sample=True, num_return_sequences=k``),
2. full: ``confide`` generate + token statistics + scorers + grading + SQLite
   store, into a fresh run directory,
3. floor: forward passes only, the same number of tokens as confide generated
   at the same rows per step (each block's prompts prefilled once, then
   decoding steps with every row busy; no statistics, no sampling),
4. bare again (the mean of both bare timings is the baseline, to even out drift).

Prints wall times, answer tokens, tokens/s, the ratios full / bare (target
<= 1.0) and full / floor, and the process's peak memory after each path.
Sampled answers differ between bare and confide (different random streams),
so the token counts differ: compare tokens/s as well as wall time.

``--prompt chat`` asks the same questions as a user's own QA file asked in a
chat turn (``prompt="chat"``: system prompt, instruction and question through
the model's chat template), the path where no k-shot exemplars are shared.

    .venv/bin/python benchmarks/overhead.py --items 30 --samples 10 --max-new-tokens 24
    .venv/bin/python benchmarks/overhead.py --prompt chat --path sampled --dtype bfloat16
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import resource
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaModel

from confide.backends.hf import HFBackend
from confide.pipeline.plan import DEFAULT_SCORERS, RunConfig
from confide.runs.execution import execute
from confide.tasks import load_task

# transformers renamed `past_key_values` to `cache` (argument and output field).
CACHE = "cache" if "cache" in inspect.signature(LlamaModel.forward).parameters else \
    "past_key_values"
SAMPLE_SCORERS = ("mc_entropy", "mc_entropy_normalized", "lexical_similarity")


def _padded(backend: HFBackend, prompts: list) -> tuple[torch.Tensor, torch.Tensor]:
    chunk = [backend.encode(p) for p in prompts]
    width = max(map(len, chunk))
    pad = backend.tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(c)) + c for c in chunk], device=backend.device)
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk],
                        device=backend.device)
    return ids, mask


def bare_generate(backend: HFBackend, prompts: list, args: argparse.Namespace, stop: list[str],
                  samples: int) -> int:
    """``model.generate`` of the greedy answers and ``samples`` samples; answer tokens made."""
    tok = backend.tokenizer
    eos = torch.tensor(sorted(backend._eos_ids), device=backend.device)
    tokens = 0
    for start in range(0, len(prompts), args.batch_size):
        ids, mask = _padded(backend, prompts[start:start + args.batch_size])
        calls = [{"do_sample": False}]
        if samples:
            calls.append({"do_sample": True, "num_return_sequences": samples,
                          "temperature": 1.0, "top_p": 0.9, "top_k": 0})
        for extra in calls:
            with torch.inference_mode():
                out = backend.model.generate(ids, attention_mask=mask,
                                             max_new_tokens=args.max_new_tokens,
                                             stop_strings=stop, tokenizer=tok,
                                             pad_token_id=tok.pad_token_id, **extra)
            tokens += int((~torch.isin(out[:, ids.shape[1]:], eos)).sum())
    return tokens


@torch.inference_mode()
def floor(backend: HFBackend, prompts: list, args: argparse.Namespace,
          tokens_per_block: list[int], rows_per_question: int, rows: int) -> None:
    """Forward passes only: prefill each block once, then decoding steps of ``rows``
    rows (confide's rows per step), every row busy, until the block's tokens are made."""
    for n, start in enumerate(range(0, len(prompts), args.batch_size)):
        ids, mask = _padded(backend, prompts[start:start + args.batch_size])
        out = backend.model(input_ids=ids, attention_mask=mask, use_cache=True,
                            logits_to_keep=1)
        cache = getattr(out, CACHE)
        index = torch.arange(ids.shape[0], device=backend.device).repeat_interleave(
            rows_per_question)[:rows]
        cache.batch_select_indices(index)
        mask, token = mask[index], out.logits[:, -1].argmax(-1)[index][:, None]
        for _ in range(math.ceil(tokens_per_block[n] / len(index))):
            mask = torch.cat([mask, mask.new_ones((len(index), 1))], dim=-1)
            out = backend.model(input_ids=token, attention_mask=mask, use_cache=True,
                                **{CACHE: cache})
            cache, token = getattr(out, CACHE), out.logits[:, -1].argmax(-1)[:, None]


def peak_mb(backend: HFBackend) -> float:
    if backend.device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(backend: HFBackend, task, prompts: list, args: argparse.Namespace,
            samples: int, task_name: str, task_options: dict) -> None:
    label = f"greedy + {samples} samples" if samples else "greedy"
    rows = []
    for start in range(0, len(prompts), args.batch_size):  # measured once per machine: untimed
        block = [backend.encode(p) for p in prompts[start:start + args.batch_size]]
        rows.append(backend.rows_per_step(max(map(len, block)) + args.max_new_tokens,
                                          len(block) * (1 + samples)))
    label += f", rows per step {'/'.join(map(str, sorted(set(rows))))}"
    t0 = time.perf_counter()
    bare_tokens = bare_generate(backend, prompts, args, task.stop, samples)
    bare_1 = time.perf_counter() - t0

    scorers = DEFAULT_SCORERS + (SAMPLE_SCORERS if samples else ())
    config = RunConfig(model=args.model, task=task_name, task_options=task_options,
                       limit=args.items, max_new_tokens=args.max_new_tokens,
                       batch_size=args.batch_size, n_samples=samples, scorers=scorers)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        outcome = execute(config, out, backend=backend)
        full = time.perf_counter() - t0
        from confide.api import open_run

        records = {r.item.id: r for r in open_run(out).records}
    per_block = []
    for start in range(0, len(task.items), args.batch_size):
        block = [records[it.id] for it in task.items[start:start + args.batch_size]]
        per_block.append(sum(r.greedy.n_tokens + sum(s.n_tokens for s in r.samples)
                             for r in block))
    memory = peak_mb(backend)

    t0 = time.perf_counter()
    for n, tokens in enumerate(per_block):
        floor(backend, prompts[n * args.batch_size:(n + 1) * args.batch_size], args, [tokens],
              1 + samples, rows[n])
    floor_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    bare_generate(backend, prompts, args, task.stop, samples)
    bare_2 = time.perf_counter() - t0
    bare = (bare_1 + bare_2) / 2
    ours = outcome.generated_tokens
    print(f"-- {label}")
    print(f"  bare generate: {bare_1:7.2f} s and {bare_2:.2f} s, {bare_tokens} answer tokens, "
          f"{bare_tokens / bare:.0f} tokens/s")
    print(f"  confide full:  {full:7.2f} s (generate + statistics "
          f"{outcome.generation_seconds:.2f} s), {ours} answer tokens, {ours / full:.0f} tokens/s")
    print(f"  floor:         {floor_s:7.2f} s, {ours} tokens, {ours / floor_s:.0f} tokens/s")
    print(f"  ratio full / bare: {full / bare:.3f} wall, "
          f"{(bare_tokens / bare) / (ours / full):.3f} in time per token   (target <= 1.0)")
    print(f"  ratio full / floor: {full / floor_s:.3f}")
    what = "GPU memory allocated" if backend.device.startswith("cuda") else "resident memory"
    print(f"  peak {what} so far: {memory:.0f} MB")


def _questions_file(items: int, folder: Path) -> str:
    """The first ``items`` bundled TriviaQA questions as a user's own QA file."""
    path = folder / "triviaqa_questions.jsonl"
    with path.open("w") as fh:
        for item in load_task("triviaqa", limit=items).items:
            fh.write(json.dumps({"id": item.id, "question": item.question,
                                 "references": list(item.references)}) + "\n")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8, help="questions per block")
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--path", choices=["greedy", "sampled", "both"], default="both")
    parser.add_argument("--prompt", choices=["kshot", "chat"], default="kshot",
                        help="TriviaQA's k-shot prompt, or the same questions in a chat turn")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args()

    backend = HFBackend(args.model, batch_size=args.batch_size, device=args.device,
                        dtype=args.dtype)
    folder = tempfile.TemporaryDirectory()
    task_name, task_options = "triviaqa", {}
    if args.prompt == "chat":
        task_name = _questions_file(args.items, Path(folder.name))
        task_options = {"prompt": "chat"}
    task = load_task(task_name, limit=args.items, **task_options)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    warm = argparse.Namespace(**{**vars(args), "max_new_tokens": 4})
    bare_generate(backend, prompts[: args.batch_size], warm, task.stop, 2)
    print(f"model {args.model} ({backend.config()['dtype']}, {backend.device}), "
          f"{args.items} TriviaQA items ({args.prompt} prompt), "
          f"{args.batch_size} questions per block, "
          f"max_new_tokens {args.max_new_tokens}")
    if args.path in ("greedy", "both"):
        measure(backend, task, prompts, args, 0, task_name, task_options)
    if args.path in ("sampled", "both"):
        measure(backend, task, prompts, args, args.samples, task_name, task_options)


if __name__ == "__main__":
    main()
