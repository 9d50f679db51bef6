"""The block forms of the free scorers (``run_scorer_block``) against the scorers themselves.

An import scores a block of records at once (``confide.runs.import_workers.scored_block``):
every value must be the per-record scorer's to the bit and every NaN must carry the same
reason, on ordinary records and on every degenerate kind the scorers know.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from confide.core.errors import CannotScore, InvalidInputError
from confide.core.records import Generation, Item, Record
from confide.equivalence.judges import make_judge
from confide.ingest import read_generations
from confide.pipeline.scorer_plan import ScorerPlan
from confide.runs.import_workers import (
    BLOCK_RECORDS,
    Setup,
    score_here,
    scored,
    scored_block,
)
from confide.scorers import SCORERS, run_scorer
from confide.scorers.base import BLOCKS, run_scorer_block
from confide.store.run_store import RunStore

BLOCKED = sorted(BLOCKS)


def _bits(pair: tuple[float, str | None]) -> tuple[str, str | None]:
    value, reason = pair
    return struct.pack("<d", value).hex(), reason  # NaN bits, -0.0 and 0.0 told apart


def _distribution(rng: random.Random, k: int) -> list[float]:
    """k sorted log-probabilities: a peaked, a flat or a nearly complete top-k."""
    kind = rng.random()
    if kind < 0.3:  # nearly all the mass listed, the last tiny: BoostedProb can tell
        p = sorted((rng.random() ** 3 for _ in range(k)), reverse=True)
        p = [v / sum(p) * (1 - 1e-4) for v in p]
        if rng.random() < 0.5:  # else the last may pass 0.005 with no tail left: all dominant
            p[-1] = min(p[-1], 0.004)
    elif kind < 0.5:  # ties
        v = rng.uniform(0.01, 1.0 / k)
        p = [v] * k
    else:
        p = [rng.uniform(1e-4, 1.0) for _ in range(k)]
        total = sum(p) / rng.uniform(0.3, 0.999)
        p = sorted((v / total for v in p), reverse=True)
    return [math.log(v) for v in p]


def _generation(rng: random.Random) -> Generation:
    t = rng.choice([1, 2, 3, 7, 8, 9, 16, 20, 20, 20, 33, 64, 127, 128, 129, 200])
    k = rng.choice([1, 2, 2, 3, 5, 5, 5, 8, 9, 10, 12])
    top = np.array([_distribution(rng, k) for _ in range(t)])
    if rng.random() < 0.2:  # unsorted rows
        top = top[:, ::-1].copy()
    chosen = top[:, 0].copy() if rng.random() < 0.7 else top[:, min(1, k - 1)].copy()
    entropies = np.array([rng.uniform(0.0, 3.0) for _ in range(t)])
    dtype = np.float32 if rng.random() < 0.8 else np.float64
    gen = Generation(text="an answer", tokens=[f"w{i}" for i in range(t)],
                     token_logprobs=chosen.astype(dtype), top_logprobs=top.astype(dtype),
                     token_entropies=entropies.astype(dtype),
                     top_tokens=[[f"a{j}" for j in range(k)] for _ in range(t)])
    fault = rng.random()
    if fault < 0.55:
        return gen
    arrays = ("token_logprobs", "top_logprobs", "token_entropies")
    name = rng.choice(arrays)
    value = getattr(gen, name)
    choice = rng.randrange(15)
    if choice == 0:
        setattr(gen, name, None)
    elif choice == 1:
        setattr(gen, name, value[:0])  # empty
    elif choice == 2:
        bad = value.copy()
        bad.flat[rng.randrange(bad.size)] = rng.choice([math.nan, -math.inf, math.inf])
        setattr(gen, name, bad)
    elif choice == 3:
        setattr(gen, name, value.tolist())  # a list, not an array
    elif choice == 4:
        bad = value.copy()
        bad.flat[rng.randrange(bad.size)] = rng.choice([0.0, -0.0, 0.5])  # zero, positive
        setattr(gen, name, bad)
    elif choice == 5:
        setattr(gen, name, np.zeros_like(value) * rng.choice([1.0, -1.0]))  # all +-0.0
    elif choice == 6:
        setattr(gen, name, value.astype(np.float16))
    elif choice == 7:
        setattr(gen, name, value.astype(np.int64))
    elif choice == 8 and value.ndim == 1:
        setattr(gen, name, value[:, None])  # 2-D where 1-D is meant
    elif choice == 9 and value.ndim == 2:
        setattr(gen, name, value[:, 0])  # 1-D where 2-D is meant
    elif choice == 10:
        setattr(gen, name, value[:-1] if len(value) > 1 else value)  # lengths differ
    elif choice == 11:
        gen.token_boosted_prob = np.full(t, 0.5, dtype=np.float32)
    elif choice == 12:
        gen.text = rng.choice(["", "   "])  # an empty answer
    elif choice == 13:
        gen.token_logprobs = np.full(t, -800.0)  # probabilities that underflow to 0
    else:
        gen.top_logprobs = np.full((t, k), -0.0)  # certain steps, signed zeros
    return gen


def _records(seed: int, n: int) -> list[Record]:
    rng = random.Random(seed)
    return [Record(Item(f"q{i}", "?"), _generation(rng)) for i in range(n)]


def _reference(name: str, records: list[Record]) -> list[tuple[str, str | None]]:
    return [_bits(run_scorer(SCORERS[name], r)) for r in records]


def test_every_free_top_k_and_log_probability_scorer_has_a_block_form() -> None:
    assert set(BLOCKED) >= {"msp", "mean_logprob", "min_logprob", "mean_entropy",
                            "max_entropy", "probability_margin", "mean_topk_negentropy",
                            "min_topk_negentropy", "boostedprob"}


# +inf among the top-k (a degenerate record) makes numpy warn, in both paths alike
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("seed", range(4))
def test_block_equals_each_record_bit_for_bit_with_the_same_reasons(seed: int) -> None:
    records = _records(seed, 600)
    for name in BLOCKED:
        expected = _reference(name, records)
        # the block in one piece, in blocks of other sizes and in a shuffled order
        assert [_bits(p) for p in run_scorer_block(SCORERS[name], records)] == expected, name
        for size in (1, 7, 256):
            got = [_bits(p) for a in range(0, len(records), size)
                   for p in run_scorer_block(SCORERS[name], records[a:a + size])]
            assert got == expected, (name, size)
        order = list(range(len(records)))
        random.Random(seed).shuffle(order)
        got = [_bits(p) for p in run_scorer_block(SCORERS[name], [records[i] for i in order])]
        assert got == [expected[i] for i in order], name


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_random_records_reach_values_and_every_kind_of_reason() -> None:
    records = _records(0, 600)
    reasons: set[str] = set()
    values = 0
    for name in BLOCKED:
        for _value, reason in run_scorer_block(SCORERS[name], records):
            values += reason is None
            if reason is not None:
                reasons.add(reason.split(" (")[0].split(";")[0][:40])
    assert values > 3000
    text = " | ".join(sorted(reasons))
    for part in ("empty answer", "boostedprob: the dominant tokens", "not finite",
                 "the backend gave no", "needs at least 2 alternatives",
                 "token logprobs and top-k alternatives"):
        assert part in text, part
    boosted = [v for v, r in run_scorer_block(SCORERS["boostedprob"], records) if r is None]
    assert len(boosted) > 50  # the rule is applied, not only refused


def test_sums_match_numpy_on_every_length_and_signed_zeros() -> None:
    from confide.scorers.whitebox import segment_sums, segments

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4) for n in
              rng.integers(1, 300, size=400)]
    arrays += [np.full(n, -0.0) for n in (1, 7, 8, 9, 130)] + [np.array([1.0, -1.0])]
    seg = segments(arrays)
    got = segment_sums(seg.values, seg)
    want = np.array([np.add.reduce(a) for a in arrays])
    assert got.tobytes() == want.tobytes()


def test_a_block_reads_as_each_record_stored_text_and_all() -> None:
    # real imported records: the stored text of each, scored in a block and one by one
    log = Path(__file__).parent / "ingest" / "data"
    files = sorted(p for p in log.glob("*.jsonl") if "openai" in p.name)
    assert files
    names = tuple(n for n in SCORERS if SCORERS[n].cost.value == "free"
                  and SCORERS[n].level == "answer" and not SCORERS[n].takes_context)
    plan = ScorerPlan([SCORERS[n] for n in names], imported=True)
    judge = make_judge("exact")
    checked = 0
    for path in files:
        try:
            imported = list(read_generations(path, on_bad_record="skip"))
        except InvalidInputError:
            continue
        block = scored_block(imported, plan, judge, "contains")
        for one, (record, caps) in zip(imported, block, strict=True):
            alone, alone_caps = scored(one, plan, judge, "contains")
            assert RunStore.encode(record) == RunStore.encode(alone)
            assert caps == alone_caps
            checked += 1
    assert checked


def _log(path: Path, n: int, bad_at: int | None = None) -> Path:
    rng = random.Random(1)
    with path.open("w") as fh:
        for i in range(n):
            if i == bad_at:
                fh.write("{not json\n")
                continue
            content = []
            for _ in range(4):
                lps = sorted((math.log(rng.uniform(0.05, 0.2)) for _ in range(3)), reverse=True)
                alts = [{"token": f" w{j}", "logprob": v} for j, v in enumerate(lps)]
                content.append({**alts[0], "top_logprobs": alts})
            fh.write(json.dumps({"id": f"r{i}", "references": ["w0"], "choices": [{
                "index": 0, "message": {"role": "assistant",
                                        "content": "".join(e["token"] for e in content)},
                "logprobs": {"content": content}}]}) + "\n")
    return path


def test_reading_stopped_mid_block_gives_the_records_before_it_first(tmp_path: Path) -> None:
    log = _log(tmp_path / "log.jsonl", BLOCK_RECORDS + 40, bad_at=BLOCK_RECORDS + 10)
    stream = read_generations(log, on_bad_record="raise")
    setup = Setup(path=log, fmt="openai", label_field=None, scorers=("msp", "boostedprob"),
                  judge="exact", grader="contains")
    seen = []
    with pytest.raises(InvalidInputError) as raised:
        for read in score_here(stream, setup, frozenset()):
            seen.append(read.item_id)
    assert raised.value.line == BLOCK_RECORDS + 11
    assert seen == [f"r{i}" for i in range(BLOCK_RECORDS + 10)]


def test_stored_ids_are_passed_over_in_a_block(tmp_path: Path) -> None:
    log = _log(tmp_path / "log.jsonl", 10)
    setup = Setup(path=log, fmt="openai", label_field=None, scorers=("msp",), judge="exact",
                  grader="contains")
    reads = list(score_here(read_generations(log), setup, frozenset({"r3", "r7"})))
    assert [r.item_id for r in reads] == [f"r{i}" for i in range(10)]
    assert [r.data is None for r in reads] == [i in (3, 7) for i in range(10)]
    assert all(json.loads(r.data)["scores"]["msp"] < 0 for r in reads if r.data)


def test_a_block_form_is_given_only_records_with_an_answer() -> None:
    seen: list[int] = []

    def block(records: list[Record]) -> list[float | CannotScore]:
        seen.append(len(records))
        return [CannotScore("nope") if i % 2 else 1.5 for i in range(len(records))]

    spec = SCORERS["msp"]
    saved = BLOCKS["msp"]
    BLOCKS["msp"] = block
    try:
        records = [Record(Item(f"q{i}", "?"), Generation(text="" if i == 1 else "x"))
                   for i in range(4)]
        out = run_scorer_block(spec, records)
    finally:
        BLOCKS["msp"] = saved
    assert seen == [3]
    assert out[0] == (1.5, None) and out[3] == (1.5, None)  # the block's first and third
    assert math.isnan(out[1][0]) and out[1][1].startswith("empty answer")
    assert math.isnan(out[2][0]) and out[2][1] == "nope"


def test_the_import_benchmark_log_stores_the_same_text_as_record_by_record(
        tmp_path: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from import_speed import free_scorers, write_log

    log = tmp_path / "bench.jsonl"
    write_log(log, 300, seed=5)
    names = tuple(free_scorers())
    plan = ScorerPlan([SCORERS[n] for n in names], imported=True)
    judge = make_judge("exact")
    imported = list(itertools.islice(read_generations(log), 300))
    for one, (record, _) in zip(imported, scored_block(imported, plan, judge, "contains"),
                                strict=True):
        assert RunStore.encode(record) == RunStore.encode(scored(one, plan, judge,
                                                                 "contains")[0])


def test_ascii_answers_normalise_as_the_unicode_steps_do() -> None:
    # the ASCII shortcut of normalize_answer (str.translate, lower) against its general steps
    import unicodedata

    from confide.text import normalize

    def general(text: str) -> str:
        text = unicodedata.normalize("NFKC", text)
        text = "".join(ch for ch in text if not normalize._is_punct_or_symbol(ch))
        folded = normalize._fold_latin_accents(text.casefold())
        return " ".join(normalize._ARTICLES.sub(" ", folded).split())

    rng = random.Random(0)
    texts = ["".join(chr(c) for c in range(128)), "The Beatles!", "Jay-Z's 1,000 A.M.",
             "an\tApple\x0b\x1c", "THE end", "a", "(A)"]
    texts += ["".join(chr(rng.randrange(128)) for _ in range(rng.randrange(30)))
              for _ in range(3000)]
    for text in texts:
        assert normalize.normalize_answer(text) == general(text), repr(text)
    assert normalize.normalize_answer("Pelé, an Ｏld man") == "pele old man"  # not ASCII
