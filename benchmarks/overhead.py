"""Overhead of confide's pipeline over bare transformers generation of the same tokens.

In one process, on the default model and N bundled TriviaQA items:

1. bare: ``model.generate`` (greedy, same prompts, same batches of ``batch_size``
   in item order, same stop string and token budget; no statistics),
2. full: ``confide`` generate + token statistics + all default scorers + grading
   + SQLite store, into a fresh run directory,
3. bare again (the mean of both bare timings is the baseline, to even out drift).

Prints the ratio full / bare (target <= 1.10), both token counts (they must be
equal: the same tokens were generated) and the peak resident memory.

    .venv/bin/python benchmarks/overhead.py --items 50
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time

import torch

from confide.backends.hf import HFBackend
from confide.runner import RunConfig, execute
from confide.tasks import load_task


def bare_generate(backend: HFBackend, prompts: list, max_new_tokens: int, stop: list[str],
                  batch_size: int) -> int:
    tok = backend.tokenizer
    tokens = 0
    for start in range(0, len(prompts), batch_size):
        chunk = [backend.encode(p) for p in prompts[start:start + batch_size]]
        width = max(map(len, chunk))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(c)) + c for c in chunk])
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk])
        with torch.inference_mode():
            out = backend.model.generate(ids, attention_mask=mask, do_sample=False,
                                         max_new_tokens=max_new_tokens, stop_strings=stop,
                                         tokenizer=tok, pad_token_id=tok.pad_token_id)
        new = out[:, width:]
        tokens += int((~torch.isin(new, torch.tensor(sorted(backend._eos_ids)))).sum())
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--device", default=None)
    args = parser.parse_args()

    backend = HFBackend(args.model, batch_size=args.batch_size, device=args.device)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    bare_generate(backend, prompts[: args.batch_size], 4, task.stop, args.batch_size)  # warm-up

    t0 = time.perf_counter()
    bare_tokens = bare_generate(backend, prompts, args.max_new_tokens, task.stop, args.batch_size)
    bare_1 = time.perf_counter() - t0

    config = RunConfig(model=args.model, limit=args.items, max_new_tokens=args.max_new_tokens,
                       batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        outcome = execute(config, out, backend=backend)
        full = time.perf_counter() - t0

    t0 = time.perf_counter()
    bare_generate(backend, prompts, args.max_new_tokens, task.stop, args.batch_size)
    bare_2 = time.perf_counter() - t0

    bare = (bare_1 + bare_2) / 2
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if backend.device.startswith("cuda"):
        peak_mb = torch.cuda.max_memory_allocated() / 2**20
    print(f"model {args.model} ({backend.config()['dtype']}, {backend.device}), "
          f"{args.items} TriviaQA items, "
          f"batch {args.batch_size}, max_new_tokens {args.max_new_tokens}")
    print(f"bare transformers generate: {bare_1:.2f} s and {bare_2:.2f} s, "
          f"{bare_tokens} answer tokens")
    print(f"confide full pipeline:      {full:.2f} s, {outcome.generated_tokens} answer tokens "
          f"(generate + statistics {outcome.generation_seconds:.2f} s)")
    print(f"ratio full / bare: {full / bare:.3f}   (target <= 1.10)")
    what = "GPU memory allocated" if backend.device.startswith("cuda") else "resident memory"
    print(f"peak {what}: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
