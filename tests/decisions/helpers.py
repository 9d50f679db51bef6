"""Hand-made stored runs for the decisions tests (written through the real RunStore)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from confide.core.records import Generation, Item, Record
from confide.store.run_store import RunStore


def generation(text: str, logprobs: list[float]) -> Generation:
    n = len(logprobs)
    return Generation(text=text, token_ids=list(range(n)), tokens=[f"t{i}" for i in range(n)],
                      token_logprobs=np.asarray(logprobs, dtype=np.float32))


def traced(answer: str, top: list[list[float]]) -> Generation:
    """A reasoning reply: a one-token final answer (none if ``answer`` is empty, as a trace
    cut by the token budget) after a trace with these top-2 rows."""
    n = len(top)
    trace = Generation(text="thinking " * n, token_ids=list(range(n)),
                       tokens=[f"t{i}" for i in range(n)],
                       token_logprobs=np.asarray([r[0] for r in top], dtype=np.float32),
                       top_logprobs=np.asarray(top, dtype=np.float32),
                       top_tokens=[["a", "b"]] * n)
    gen = generation(answer, [-0.1] if answer else [])
    gen.trace = trace
    if not answer:
        gen.finish_reason = "length"
    return gen


def write_run(path: Path, records: list[Record], *, model: str = "hand", grader: str = "contains"
              ) -> Path:
    """Store ``records`` as a run of ``model`` graded by ``grader``."""
    scorers = sorted({s for r in records for s in r.scores})
    config = {"model": model, "task": "hand", "grader": grader, "scorers": scorers, "seed": 0}
    with RunStore.open(path, config) as store:
        for i, record in enumerate(records):
            store.put(record, i)
    return path


def scored_records(confidence, correct, *, scorer: str = "msp", grader: str = "contains",
                   tokens: int = 3, seconds: float = 0.1, prefix: str = "q") -> list[Record]:
    """One record per (confidence, correct) pair; the greedy answer has ``tokens`` tokens."""
    out = []
    for i, (c, y) in enumerate(zip(confidence, correct)):
        item = Item(id=f"{prefix}{i}", prompt=f"question {i}?", references=["yes"])
        out.append(Record(item=item, greedy=generation("yes" if y else "no", [-0.1] * tokens),
                          scores={scorer: float(c)}, grades={grader: float(y)},
                          seconds=seconds))
    return out
