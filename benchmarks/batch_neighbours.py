"""How much a reply's confidence moves with its batch neighbours (why ``confide serve``
generates each request alone by default).

Generates the same TriviaQA prompts greedily in blocks of 8 and one at a time with
the bundled model, and prints how far ``mean_logprob`` and the answer text move::

    .venv/bin/python benchmarks/batch_neighbours.py --items 16
"""

from __future__ import annotations

import argparse

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)

    from confide.backends.base import GenerationSpec
    from confide.backends.hf import HFBackend
    from confide.tasks import load_task

    model = HFBackend("smollm2", batch_size=args.batch)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=model.has_chat_template) for it in task.items]
    spec = GenerationSpec(max_new_tokens=16, stop=("\n",))

    def mean_logprob(gen) -> float:
        return float(np.mean(gen.token_logprobs)) if gen.n_tokens else float("nan")

    moves, same = [], 0
    for start in range(0, len(prompts), args.batch):
        block = prompts[start:start + args.batch]
        together = model.generate(block, spec, [0] * len(block))
        for prompt, in_batch in zip(block, together, strict=True):
            alone = model.generate([prompt], spec, [0])[0]
            moves.append(abs(mean_logprob(alone.greedy) - mean_logprob(in_batch.greedy)))
            same += alone.greedy.text == in_batch.greedy.text
    d = np.asarray(moves)
    print(f"{len(d)} items, dtype {model.config()['dtype']}: |mean_logprob alone - in a batch "
          f"of {args.batch}| median {np.nanmedian(d):.4f}, max {np.nanmax(d):.4f} nats; "
          f"same answer text {same}/{len(d)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
