"""Hand-made stored runs for the report tests (no model): records built in numpy, stored
with the real RunStore."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from confide.core.records import Generation, Item, Record
from confide.store.run_store import RunStore

#: Text that would run script if a report ever parsed it as HTML.
HOSTILE_ANSWER = '<script>window.__pwned = 1</script>"><img src=x onerror="window.__pwned = 2">'
HOSTILE_QUESTION = "Which tag? </script><script>window.__pwned = 3</script>"
HOSTILE_SAMPLE = "\"'><img src=x onerror=\"window.__pwned = 4\"><svg onload=\"window.__pwned = 5\">"
HOSTILE_REFERENCE = "<iframe src=\"javascript:window.__pwned = 6\"></iframe>"
HOSTILE_TOKEN = "\"><img src=x onerror=\"window.__pwned = 7\">"


def make_records(n: int, *, seed: int = 0, graders: tuple[str, ...] = ("contains",),
                 n_samples: int = 3, hostile: bool = False, id_prefix: str = "q",
                 skill: float = 3.0) -> list[Record]:
    """``n`` records whose correctness follows the mean log-probability (so scorers work)."""
    rng = np.random.default_rng(seed)
    words = ["Paris", "London", "Rome", "Berlin", "Madrid", "Oslo"]
    records = []
    for i in range(n):
        k = int(rng.integers(1, 7))
        tokens = [(" " if j else "") + str(rng.choice(words)) for j in range(k)]
        logprobs = -rng.exponential(0.6, k)
        entropies = rng.exponential(1.0, k)
        question = f"Question number {i}: which city?"
        references = [str(rng.choice(words))]
        if hostile and i == 0:
            tokens = ["<script>", "window.__pwned = 1", "</script>", HOSTILE_TOKEN]
            k = len(tokens)
            logprobs, entropies = logprobs[:1].repeat(k), entropies[:1].repeat(k)
            question, references = HOSTILE_QUESTION, [HOSTILE_REFERENCE, "Paris"]
        text = HOSTILE_ANSWER if hostile and i == 0 else "".join(tokens)
        top_tokens = [[t, "<b>alt</b>", "'"] for t in tokens]
        top_logprobs = np.stack([logprobs, logprobs - 1.0, logprobs - 2.5], axis=1)
        greedy = Generation(text=text, token_ids=list(range(k)), tokens=tokens,
                            token_logprobs=logprobs.astype(np.float32),
                            token_entropies=entropies.astype(np.float32),
                            top_logprobs=top_logprobs.astype(np.float32), top_tokens=top_tokens)
        pool = [text, "Paris", "paris.", HOSTILE_SAMPLE if hostile else "Lyon"]
        samples = [Generation(text=str(pool[int(rng.integers(len(pool)))]))
                   for _ in range(n_samples)]
        p_right = 1 / (1 + np.exp(-skill * logprobs.mean() - 1.0))
        right = float(rng.random() < p_right)
        grades = {g: right if j == 0 else float(rng.random() < 0.5 + 0.4 * (right - 0.5))
                  for j, g in enumerate(graders)}
        scores = {"msp": float(np.exp(logprobs.sum())), "mean_entropy": float(-entropies.mean()),
                  "length": -float(k)}
        errors = {}
        if i % 17 == 5:  # a scorer that could not answer on some items
            scores["msp"] = float("nan")
            errors["msp"] = "no token log-probabilities"
        records.append(Record(item=Item(id=f"{id_prefix}{i}", prompt=question,
                                        references=references),
                              greedy=greedy, samples=samples, scores=scores,
                              score_errors=errors, grades=grades))
    return records


def store_run(path: Path, records: list[Record], *, model: str = "hand-made",
              grader: str = "contains",
              scorers: tuple[str, ...] = ("msp", "mean_entropy", "length"),
              ) -> Path:
    """Store records as a run at ``path`` with the real RunStore."""
    config = {"model": model, "task": {"name": "hand"}, "grader": grader, "scorers": list(scorers),
              "seed": 0}
    with RunStore.open(path, config) as store:
        for position, record in enumerate(records):
            store.put(record, position)
    return path
