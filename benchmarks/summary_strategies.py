"""How faithfully three summary strategies describe the model's answer distribution (SelfReflect).

For bundled TriviaQA questions the bundled model samples ``2k`` answers: the
first ``k`` stand for the distribution (the summaries may read them), the other
``k`` are the test answers whose words the judge fills in
(:func:`confide.evaluation.selfreflect.selfreflect_distance`, lower = more faithful).
Strategies:

* ``greedy``: the greedy answer alone (the paper's baseline);
* ``clusters``: :func:`confide.equivalence.summary.summarize` of the ``k`` samples' clusters;
* ``model``: the model itself asked to summarise the ``k`` samples in one answer
  (the paper's "sample and summarise", in confide's wording).

Prints each strategy's mean distance with a bootstrap interval, and how often
each is the closest::

    nice -n 10 .venv/bin/python benchmarks/summary_strategies.py --items 8 --k 4
"""

from __future__ import annotations

import argparse

import numpy as np

_ASK = ("Here are {k} answers to the question \"{q}\":\n{answers}\n\nWrite one short answer "
        "that says which of these answers is most likely and which others are possible, "
        "like: Most likely X; possibly Y. Answer:")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from confide.backends.base import GenerationSpec, item_seed
    from confide.backends.hf import HFBackend
    from confide.equivalence.summary import summarize
    from confide.evaluation.selfreflect import selfreflect_distance
    from confide.tasks import load_task

    model = HFBackend("smollm2", batch_size=8, max_rows=16)  # no row-count tuning run
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=model.has_chat_template) for it in task.items]
    spec = GenerationSpec(max_new_tokens=24, stop=tuple(task.stop), n_samples=2 * args.k)
    results = model.generate(prompts, spec, [item_seed(args.seed, it.id) for it in task.items])
    asks = []
    for it, r in zip(task.items, results, strict=True):
        listing = "\n".join(f"- {s.text}" for s in r.samples[:args.k])
        asks.append([{"role": "user", "content": _ASK.format(k=args.k, q=it.question,
                                                             answers=listing)}])
    written = model.generate(asks, GenerationSpec(max_new_tokens=40, stop=("\n",)),
                             [0] * len(asks))
    names = ("greedy", "clusters", "model")
    distances: dict[str, list[float]] = {n: [] for n in names}
    for it, r, w in zip(task.items, results, written, strict=True):
        conditioning = [s.text for s in r.samples[:args.k]]
        test = [s.text for s in r.samples[args.k:]]
        summaries = {"greedy": r.greedy.text, "clusters": summarize(conditioning).text,
                     "model": w.greedy.text or "(no answer)"}
        got = selfreflect_distance(model, it.question, summaries, conditioning, test)
        for n in names:
            distances[n].append(got.distances[n])
    table = np.array([distances[n] for n in names])  # strategies × items
    ok = ~np.isnan(table).any(axis=0)
    table = table[:, ok]
    rng = np.random.default_rng(0)
    boots = rng.integers(0, table.shape[1], size=(1000, table.shape[1]))
    best = np.bincount(np.argmin(table, axis=0), minlength=len(names))
    print(f"{table.shape[1]} TriviaQA items, SmolLM2 answers and judges; k = {args.k} "
          f"conditioning and {args.k} test samples per item")
    for i, n in enumerate(names):
        lo, hi = np.quantile(table[i][boots].mean(axis=1), [0.025, 0.975])
        print(f"{n:>9}: SelfReflect distance {table[i].mean():.3f} [{lo:.3f}, {hi:.3f}], "
              f"closest on {best[i]} items")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
