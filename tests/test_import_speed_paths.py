"""The import's fast paths give what the plain paths gave: msgspec reading a line as
:func:`json.loads` does (unusual numbers, escapes, lone surrogates still refused), msgspec
writing a record as :func:`json.dumps` would be read back (NaN and non-JSON types still
refused), and the whole-answer entropy bounds equal to
:func:`confide.backends.topk.topk_entropies` bit for bit."""

from __future__ import annotations

import enum
import json
import math
import random
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import confide.ingest.common as common
import confide.store.run_store as run_store
from confide.backends.topk import topk_entropies
from confide.core.records import Generation, Item, Record
from confide.ingest.common import BadField, decode_line, is_blank
from confide.ingest.openai import _topk_entropies
from confide.runs.importing import import_file
from confide.store.run_store import RunStore


class _Refuses:
    """A decoder that reads nothing: every line goes to :func:`json.loads`."""

    def decode(self, raw: bytes) -> Any:
        raise msgspec.DecodeError("the json path")


def _exact(value: Any) -> Any:
    """``value`` with its types and the sign of zero spelled out, to compare exactly."""
    if isinstance(value, BadField):
        return ("BadField", value.field, value.message)
    if is_blank(value):
        return ("blank",)
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact(v) for v in value]
    return (type(value).__name__, repr(value))


def _both(raw: bytes, monkeypatch: pytest.MonkeyPatch, n: int = 2) -> tuple[Any, Any]:
    fast = _exact(decode_line(raw, n))
    with monkeypatch.context() as m:
        m.setattr(common, "_FAST_DECODER", _Refuses())
        plain = _exact(decode_line(raw, n))
    return fast, plain


UNUSUAL = [
    b'{"v": -0.0, "w": -0, "x": 1e-320, "y": 5e-324, "z": 2.5e-324, "u": 1e-400}\n',
    b'{"big": 18446744073709551616, "neg": -9223372036854775809, "huge": '
    b'123456789012345678901234567890, "max": 18446744073709551615}\n',
    b'{"inf": 1e400, "ninf": -1e400, "edge": 1.7976931348623157e308}\n',
    b'{"nan": NaN, "i": Infinity, "m": -Infinity}\n',
    b'{"e": "\\u00e9\\u4e2d", "pair": "\\ud83d\\ude00", "nul": "\\u0000", "s": "\\/"}\n',
    b'{"a": 1, "a": 2}\n',
    b'{"lone": "x\\udcff"}\n',
    b'{"lone": ["ok", "\\ud83d"]}\n',
    b'{"\\ud800key": 1}\n',
    b'{"bad": "\xed\xa0\x80"}\n',
    b'{"bad": "\xff"}\n',
    b'   \n',
    b'\n',
    b'{"cut": [1, 2\n',
    b'{"trailing": 1} x\n',
    b'[1, 2.5, "x", null, true]\r\n',
    b'\xef\xbb\xbf{"bom": 1}\n',
    b'{"deep": ' + b'[' * 2000 + b']' * 2000 + b'}\n',
]


@pytest.mark.parametrize("raw", UNUSUAL)
def test_a_line_reads_as_json_loads_reads_it(raw: bytes, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    fast, plain = _both(raw, monkeypatch, n=1)
    assert fast == plain


def test_lone_surrogates_are_still_refused_by_field() -> None:
    value = decode_line(b'{"a": {"b": ["ok", "x\\udcff"]}}\n', 3)
    assert isinstance(value, BadField) and value.field == "a.b[1]"
    assert "lone surrogate \\udcff" in value.message


def test_mutated_lines_read_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    seeds = [b'{"a": [1, -0.0, 1e-320, "x\\u00e9", {"b": null, "c": true}], '
             b'"d": 18446744073709551616}', b'[1.5e300, -2, "\\ud83d\\ude00", ""]']
    alphabet = b'0123456789-+.eE"\\u{}[],: \t\nabdfnrt\x00\x7f\xc3\xa9'
    read = 0
    for _ in range(3000):
        line = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(line) + 1)
            if rng.random() < 0.5 and at < len(line):
                line[at] = rng.choice(alphabet)
            else:
                line.insert(at, rng.choice(alphabet))
        fast, plain = _both(bytes(line), monkeypatch)
        assert fast == plain, bytes(line)
        read += isinstance(plain, dict | list)
    assert read > 100  # the mutations left many lines readable


# --- a whole import, fast and plain -------------------------------------------------------


def _step(token: str, alts: list[tuple[str, float]]) -> dict[str, Any]:
    lp = dict(alts).get(token, alts[-1][1] - 1.0)
    return {"token": token, "logprob": lp, "bytes": list(token.encode()),
            "top_logprobs": [{"token": t, "logprob": v} for t, v in alts]}


def _response(rid: Any, tokens: list[str], alts: list[list[tuple[str, float]]],
              content: str | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion", "model": "m\u00e9",
            "references": ["Paris"],
            "request": {"messages": [{"role": "user", "content": "Capital \u4e2d?"}]},
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": "".join(tokens) if content is None
                                     else content},
                         "logprobs": {"content": [_step(t, a)
                                                  for t, a in zip(tokens, alts)]}}]}


def _log(path: Path) -> Path:
    zero = [("Paris", -0.0)]
    tiny = [(" is", -1e-320), (" was", -800.0)]
    tied = [(" the", -1.0), (" a", -1.0), (" an", -1.5)]
    lines = [
        json.dumps(_response("r-1", ["Paris"], [zero])),
        json.dumps(_response(2 ** 70, ["Paris", " is"], [zero, tiny])),
        json.dumps(_response("r-\u00e9", ["It", " the", " caf\u00e9"],
                             [[("It", -0.5), ("This", -2.0)], tied,
                              [(" caf\u00e9", -0.25), (" bar", -3.0)]]),
                   ensure_ascii=True),
        json.dumps(_response("r-4", ["Par", "is"], [[("Par", -0.1), ("Lon", -2.5)],
                                                   [("is", -1e-5), ("ish", -12.0)]])),
        '{"id": "r-5", "object": "chat.completion", "choices": [{"index": 0, "message": '
        '{"content": "x\\udcff"}}]}',
        '{"id": "r-6", "object": "chat.completion", "choices": [{"index": 0, "message": '
        '{"content": "Paris"}, "logprobs": {"content": [{"token": "Paris", "logprob": NaN}]}}]}',
        json.dumps(_response("r-7", ["Rome"], [[("Rome", -0.7), ("Roma", -0.8)]])),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _stored(run: Path) -> list[Any]:
    store = RunStore.open(run)
    try:
        return [_exact(json.loads(d)) for (d,) in store._conn.execute(
            "SELECT data FROM records ORDER BY position")]
    finally:
        store.close()


def test_an_import_stores_what_the_json_path_stored(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = _log(tmp_path / "log.jsonl")
    fast = import_file(log, tmp_path / "fast", scorers="free", on_bad_record="skip",
                       workers=1)
    with monkeypatch.context() as m:
        m.setattr(common, "_FAST_DECODER", _Refuses())
        m.setattr(run_store, "_plain", lambda value: False)  # json.dumps writes
        plain = import_file(log, tmp_path / "plain", scorers="free", on_bad_record="skip",
                            workers=1)
    assert fast.imported == plain.imported == 5
    assert [why for _, why in fast.bad_records] == [why for _, why in plain.bad_records]
    assert any("lone surrogate" in why for _, why in fast.bad_records)
    assert any("finite" in why for _, why in fast.bad_records)
    assert _stored(tmp_path / "fast") == _stored(tmp_path / "plain")
    with RunStore.open(tmp_path / "fast") as store:
        records = store.records()
    assert [r.item.id for r in records][:2] == ["r-1", str(2 ** 70)]
    assert math.copysign(1.0, float(records[0].greedy.token_logprobs[0])) == -1.0  # -0.0 kept


# --- writing a record ----------------------------------------------------------------------


def _record(**metadata: Any) -> Record:
    gen = Generation(text="Paris", tokens=["Par", "is"], token_ids=[1, 2 ** 70],
                     token_logprobs=np.asarray([-0.0, -1e-30], dtype=np.float32),
                     top_logprobs=np.asarray([[-0.0, -5.0], [-1e-30, -7.0]], np.float32),
                     top_tokens=[["Par", "Lon"], ["is", "\u00e9"]])
    return Record(item=Item("q\u00e9", [{"role": "user", "content": "x"}], ["Paris"],
                            metadata=metadata), greedy=gen,
                  scores={"msp": -0.5, "bad": math.nan}, score_errors={"bad": "why"},
                  grades={"contains": 1.0}, seconds=0.25)


@pytest.mark.parametrize("metadata", [{}, {"n": 2 ** 80, "f": [1e-320, -0.0]},
                                      {"text": "x\udcff"}, {"t": (1, "a")}])
def test_the_stored_text_reads_back_as_json_dumps_text(metadata: dict[str, Any]) -> None:
    record = _record(**metadata)
    fast = RunStore.encode(record)
    plain = json.dumps(record.to_dict(), allow_nan=False)
    assert _exact(json.loads(fast)) == _exact(json.loads(plain))


class _Colour(enum.Enum):
    RED = 1


@pytest.mark.parametrize("metadata, error", [
    ({"x": math.nan}, ValueError), ({"x": [1.0, -math.inf]}, ValueError),
    ({"x": _Colour.RED}, TypeError), ({"x": {1, 2}}, TypeError), ({"x": b"ab"}, TypeError),
    ({"x": np.float32(1.0)}, TypeError)])
def test_what_json_refuses_is_still_refused(metadata: dict[str, Any],
                                            error: type[Exception]) -> None:
    with pytest.raises(error):
        RunStore.encode(_record(**metadata))
    record = _record()
    record.grades["contains"] = math.inf
    with pytest.raises(ValueError):
        RunStore.encode(record)


# --- entropy bounds ------------------------------------------------------------------------


def _answer(rng: random.Random) -> Generation:
    words = ["a", "b", "c", "d", "e", "f", "g"]
    n, k = rng.randint(1, 10), rng.randint(1, 6)
    tops, names, tokens, chosen = [], [], [], []
    for _ in range(n):
        row = rng.sample(words, k)
        values = [math.log(rng.uniform(1e-6, 1.0)) * rng.choice([1.0, 3.0, 1e-3])
                  for _ in row]
        kind = rng.random()
        if kind < 0.1:
            values = [values[0]] * k  # ties keep their order
        elif kind < 0.15:
            values = [-0.0] + [-30.0] * (k - 1)  # all the mass on one token
        if rng.random() < 0.4:
            values.sort(reverse=True)  # listed best first, as the API does
        pick = rng.random()
        if pick < 0.3:
            token, lp = row[values.index(min(values))], min(values)  # set apart
        elif pick < 0.5:
            token, lp = "z", math.log(rng.uniform(1e-6, 0.2))  # not listed
        else:
            i = rng.randrange(k)
            token, lp = row[i], values[i]
        tops.append(values)
        names.append(row)
        tokens.append(token)
        chosen.append(lp)
    return Generation(text="x", tokens=tokens, token_logprobs=np.asarray(chosen, np.float32),
                      top_logprobs=np.asarray(tops, np.float32), top_tokens=names)


def test_whole_answer_bounds_equal_the_per_step_rule_bit_for_bit() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        gen = _answer(rng)
        (want, want_note), (got, got_note) = topk_entropies(gen), _topk_entropies(gen)
        assert want is not None and got is not None
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        assert got_note == want_note


def test_bounds_outside_the_common_case_are_the_rule_s_own() -> None:
    gen = Generation(text="x", tokens=["a"], token_logprobs=np.asarray([-0.1], np.float32),
                     top_logprobs=np.asarray([[-0.1, -np.inf]], np.float32),
                     top_tokens=[["a", "b"]])
    assert _topk_entropies(gen)[0].tobytes() == topk_entropies(gen)[0].tobytes()
    gen.top_tokens = [["a"]]  # a row of another length: the rule's own error
    with pytest.raises(ValueError):
        topk_entropies(gen)
    with pytest.raises(ValueError):
        _topk_entropies(gen)


# --- the fast chat reading -----------------------------------------------------------------


class _Text(str):
    """A text of a str subclass (numpy's str_ is one): the checked path makes it a str."""


def _chat_choice(rng: random.Random) -> dict[str, Any]:
    """A chat choice, mostly well formed, with each kind of fault the checks know now and
    then."""
    words = ["Par", "is", " the", " a", "Rome", ".", "\u00e9", "<|eot|>"]
    n, k = rng.randint(0, 6), rng.randint(1, 4)
    faulty = rng.random() < 0.4  # else only the common case
    content: list[Any] = []
    for _ in range(n):
        names = rng.sample(words, k)
        weights = [rng.uniform(1e-4, 1.0) for _ in names]
        mass = rng.choice([1.0, 1.0 + 1e-3, 1.0 + 2e-3, 1.2]) if faulty and rng.random() < 0.3 \
            else rng.uniform(0.3, 0.99)
        values: list[Any] = sorted((math.log(w * mass / sum(weights)) for w in weights),
                                   reverse=True)
        pick = rng.random()
        if pick < 0.6:
            i = rng.randrange(k)
            token, lp = names[i], values[i]
            if faulty and rng.random() < 0.1:
                lp += rng.choice([5e-4, 2e-3])  # near or far from its own entry
        else:
            token, lp = rng.choice([w for w in words if w not in names] or words), \
                math.log(rng.uniform(1e-4, 0.3))
        entry: dict[str, Any] = {"token": token, "logprob": lp, "bytes": [1],
                                 "top_logprobs": [{"token": t, "logprob": v}
                                                  for t, v in zip(names, values)]}
        fault = rng.random() if faulty else 1.0
        if fault < 0.03:
            entry["logprob"] = rng.choice([0, -1, True, "x", None, 1e-3, -1e30, -(2 ** 30),
                                           math.nan, -math.inf, 2 ** 70])
        elif fault < 0.05:
            alt = rng.choice(entry["top_logprobs"])
            alt["logprob"] = rng.choice([0, -2, False, None, math.inf, -(2 ** 30)])
        elif fault < 0.07:
            entry["token"] = rng.choice([_Text(token), 3, None])
        elif fault < 0.08:
            rng.choice(entry["top_logprobs"])["token"] = rng.choice([_Text("x"), 1])
        elif fault < 0.1:
            entry["top_logprobs"] = rng.choice([None, [], entry["top_logprobs"][:-1] or None,
                                                "x", [1]])
        elif fault < 0.11:
            del entry[rng.choice(["token", "logprob", "top_logprobs"])]
        elif fault < 0.12:
            entry = rng.choice([[], "x", None])  # type: ignore[assignment]
        content.append(entry)
    spelled = "".join(e["token"] for e in content
                      if isinstance(e, dict) and isinstance(e.get("token"), str))
    text = spelled.split("<|eot|>")[0]
    if faulty and rng.random() < 0.1:
        text = "Paris"  # tokens that do not spell it
    choice: dict[str, Any] = {"index": 0, "finish_reason": rng.choice(["stop", None, "length"]),
                              "message": {"role": "assistant", "content": text},
                              "logprobs": {"content": content}}
    if faulty and rng.random() < 0.1:
        choice = {"index": 0, "text": text, "logprobs": {"content": content}}  # legacy shape
    return choice


def _read(choice: dict[str, Any]) -> Any:
    """What the openai reader makes of ``choice``: its generation and notes, or its error."""
    from confide.ingest.common import Context
    from confide.ingest.openai import _choice

    try:
        gen, notes = _choice(choice, "choices[0]", Context("log", "log", 1))
    except BadField as exc:
        return ("BadField", exc.field, exc.message)
    d = gen.to_dict()
    for key in ("token_logprobs", "top_logprobs", "token_entropies"):
        arr = getattr(gen, key)
        d[key] = None if arr is None else (arr.dtype.str, arr.shape, arr.tobytes())
    d["types"] = sorted({type(t).__name__ for t in gen.tokens}
                        | {type(t).__name__ for row in gen.top_tokens or [] for t in row})
    return d, notes


def test_the_fast_chat_reading_reads_as_the_checked_one(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    import confide.ingest.openai as openai_reader

    rng = random.Random(11)
    fast_taken = errors = 0
    real = openai_reader._chat_statistics
    for _ in range(4000):
        choice = _chat_choice(rng)
        fast = _read(json.loads(json.dumps(choice)) if rng.random() < 0.5 else choice)
        with monkeypatch.context() as m:
            m.setattr(openai_reader, "_chat_statistics", lambda *args: None)
            plain = _read(choice)
        assert fast == plain, choice
        lp = choice["logprobs"]
        try:
            from confide.backends.openai_logprobs import generation_from_choice
            taken = real(choice, lp, generation_from_choice(choice, logprobs=False),
                         choice.get("message", {}).get("content") or "", "x") is not None
        except Exception:
            taken = False
        fast_taken += taken
        errors += plain[0] == "BadField"
    assert fast_taken > 1500 and errors > 200  # both roads well travelled


# --- the shared top-k of the scorers --------------------------------------------------------


def _topk_answer(rng: random.Random) -> Record:
    n, k = rng.randint(1, 12), rng.randint(2, 12)
    rows = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.35:  # one dominant token, a tail under 0.005: the top-k can tell
            rest = [rng.uniform(1e-6, 0.004) for _ in range(k - 1)]
            head = rng.uniform(0.3, 1.0 - sum(rest))
            row = [math.log(head)] + [math.log(v) for v in rest]
            if rng.random() < 0.3:
                row[1] = math.log(rng.uniform(0.1, head))  # a group of two
        elif kind < 0.45:
            row = [-0.0] + [-math.inf] * (k - 1)
        elif kind < 0.55:
            row = [math.log(1.0 / k)] * k
        else:
            weights = [rng.random() ** 3 for _ in range(k)]
            total = sum(weights) / rng.uniform(0.95, 1.0)
            row = [math.log(w / total) if w > 0 else -math.inf for w in weights]
        if rng.random() < 0.5:
            rng.shuffle(row)
        rows.append(row)
    top = np.asarray(rows, np.float32)
    chosen = [r[rng.randrange(k)] if rng.random() < 0.8 else math.log(rng.uniform(1e-5, 0.3))
              for r in rows]
    chosen = [v if v > -math.inf else max(r) for v, r in zip(chosen, rows)]
    return Record(Item("x", "q"), Generation(
        "a", token_ids=list(range(n)), tokens=["t"] * n,
        token_logprobs=np.asarray(chosen, np.float32), top_logprobs=top,
        token_entropies=np.asarray([rng.uniform(0, 3) for _ in range(n)], np.float32)))


def _per_step(record: Record) -> dict[str, tuple[float, str | None]]:
    """The top-k scorers as they were computed step by step, on fresh arrays."""
    from confide.core.errors import CannotScore
    from confide.scorers.information import boosted_token_probability

    gen = record.greedy
    top = -np.sort(-np.asarray(gen.top_logprobs, np.float64), axis=1)
    chosen = np.asarray(gen.token_logprobs, np.float64)
    p = np.exp(top - top.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    negentropy = 1.0 + plogp.sum(axis=1) / math.log(top.shape[1])
    q = np.exp(top)
    out: dict[str, tuple[float, str | None]] = {
        "probability_margin": (float(np.mean(q[:, 0] - q[:, 1])), None),
        "mean_topk_negentropy": (float(np.mean(negentropy)), None),
        "min_topk_negentropy": (float(np.min(negentropy)), None)}
    try:
        out["boostedprob"] = (float(np.mean([boosted_token_probability(lp, row)
                                             for lp, row in zip(chosen, top)])), None)
    except CannotScore as exc:
        out["boostedprob"] = (math.nan, exc.reason)
    logprobs = np.asarray(gen.token_logprobs, np.float64)
    entropies = np.asarray(gen.token_entropies, np.float64)
    out.update({"msp": (float(np.sum(logprobs)), None),
                "mean_logprob": (float(np.mean(logprobs)), None),
                "min_logprob": (float(np.min(logprobs)), None),
                "mean_entropy": (-float(np.mean(entropies)), None),
                "max_entropy": (-float(np.max(entropies)), None)})
    return out


def _same(got: tuple[float, str | None], want: tuple[float, str | None]) -> bool:
    if want[1] is not None:
        return math.isnan(got[0]) and got[1] is not None and got[1].startswith(want[1])
    return got[1] is None and (got[0] == want[0] or (math.isnan(got[0]) and math.isnan(want[0])))


def test_shared_topk_scorers_equal_the_per_step_rule_bit_for_bit() -> None:
    from confide.scorers import SCORERS, run_scorer

    rng = random.Random(5)
    boosted = refused = 0
    for _ in range(3000):
        record = _topk_answer(rng)
        want = _per_step(record)
        for name in rng.sample(sorted(want), len(want)):  # any order of the scorers
            got = run_scorer(SCORERS[name], record)
            assert _same(got, want[name]), (name, got, want[name], record.greedy)
        boosted += want["boostedprob"][1] is None
        refused += want["boostedprob"][1] is not None
    assert boosted > 500 and refused > 500


def test_the_shared_values_follow_an_array_changed_in_place() -> None:
    from confide.scorers import SCORERS, run_scorer

    record = _topk_answer(random.Random(1))
    names = ["msp", "min_logprob", "probability_margin", "mean_topk_negentropy",
             "max_entropy", "boostedprob"]
    before = {n: run_scorer(SCORERS[n], record) for n in names}
    gen = record.greedy
    gen.token_logprobs[0] -= 1.0
    gen.top_logprobs[0, :] = gen.top_logprobs[0, ::-1] - 0.5
    gen.token_entropies[-1] += 2.0
    after = {n: run_scorer(SCORERS[n], record) for n in names}
    want = _per_step(record)
    for name in names:
        assert _same(after[name], want[name]), name
    assert after["msp"] != before["msp"] and after["max_entropy"] != before["max_entropy"]


# --- many records read together -------------------------------------------------------------


def _generation_bits(gen: Generation | None) -> Any:
    if gen is None:
        return None
    d = gen.to_dict()
    for key in ("token_logprobs", "top_logprobs", "token_entropies"):
        arr = getattr(gen, key)
        d[key] = None if arr is None else (arr.dtype.str, arr.shape, arr.tobytes())
    d["trace"] = _generation_bits(gen.trace)
    return d


def _imported_bits(got: Any) -> Any:
    """Everything of a record read, arrays to the bit; an error as its kind and text."""
    if isinstance(got, Exception):
        return (type(got).__name__, str(got))
    return (got.item.to_dict(), _generation_bits(got.greedy),
            [_generation_bits(s) for s in got.samples], got.label, got.line,
            sorted(got.capabilities), got.approximate)


def _log_record(rng: random.Random, i: int) -> Any:
    """A log record of one or more chat choices (:func:`_chat_choice`), now and then with a
    trace in a field of its own, ints for log-probabilities, or a fault outside them."""
    choices = [_chat_choice(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    for j, choice in enumerate(choices):
        choice["index"] = j
        if rng.random() < 0.05 and "message" in choice:
            choice["message"]["reasoning_content"] = "Let me think."
        if rng.random() < 0.05:
            for entry in (choice.get("logprobs") or {}).get("content") or []:
                if isinstance(entry, dict) and isinstance(entry.get("top_logprobs"), list):
                    for alt in entry["top_logprobs"]:
                        if isinstance(alt, dict) and rng.random() < 0.3:
                            alt["logprob"] = rng.choice([-3, -40, -(2 ** 24)])
    record: dict[str, Any] = {"id": f"r{i}", "object": "chat.completion", "model": "m",
                              "choices": choices, "references": ["Paris"]}
    fault = rng.random()
    if fault < 0.03:
        record["references"] = {"x": 1}
    elif fault < 0.05:
        record["label"] = "yes"
    elif fault < 0.06:
        record["choices"][0]["index"] = 7
    elif fault < 0.07:
        return rng.choice([[1], "x", None])
    return record


def test_records_read_together_read_as_each_alone() -> None:
    """The block reading (``parse_values``, ``openai.parse_many``) gives each record's
    reading alone: the same generations to the bit, notes, capabilities, and the same
    error, at the same record, in blocks of every size."""
    from confide.ingest.common import Context
    from confide.ingest.openai import parse, parse_many
    from confide.ingest.reading import parse_value, parse_values

    rng = random.Random(21)
    records = [_log_record(rng, i) for i in range(3000)]
    path = Path("log.jsonl")
    alone = []
    for i, obj in enumerate(records):
        try:
            alone.append(_imported_bits(parse_value(obj, i + 1, path, "openai")))
        except Exception as exc:
            alone.append(_imported_bits(exc))
    for size in (1, 7, 32, 500):
        together = []
        for a in range(0, len(records), size):
            block = [(i + 1, records[i]) for i in range(a, min(a + size, len(records)))]
            together += [_imported_bits(got) for got in parse_values(block, path, "openai")]
        assert together == alone, size
    kinds = {bits[0] if isinstance(bits[0], str) else "read" for bits in alone}
    assert kinds == {"read", "InvalidInputError"}
    read = [b for b in alone if not isinstance(b[0], str)]
    assert sum(b[1]["token_entropies"] is not None for b in read) > 1000
    assert sum(bool(b[2]) for b in read) > 100  # with samples
    # parse_many itself: the same BadField a record's parse raises
    pairs = [(obj, Context("log", "log", i + 1)) for i, obj in enumerate(records[:400])
             if isinstance(obj, dict)]
    for (obj, ctx), got in zip(pairs, parse_many(pairs), strict=True):
        try:
            want = _imported_bits(parse(obj, ctx))
        except BadField as exc:
            want = _imported_bits(exc)
        assert _imported_bits(got) == want


def test_the_reader_pauses_the_collector_only_while_a_block_is_read(tmp_path: Path) -> None:
    import gc

    from confide.core.errors import InvalidInputError
    from confide.ingest import read_generations

    log = _log(tmp_path / "log.jsonl")
    seen = [gc.isenabled() for _ in read_generations(log, on_bad_record="skip")]
    assert len(seen) == 5 and all(seen) and gc.isenabled()
    gc.disable()
    try:
        assert len(list(read_generations(log, on_bad_record="skip"))) == 5
        assert not gc.isenabled()  # left off as the caller had it
    finally:
        gc.enable()
    # read in one block, a bad record still comes after the records before it, in its turn
    stream, got = read_generations(log), []
    with pytest.raises(InvalidInputError, match=r"log\.jsonl:5: choices\[0\]\.message"):
        for record in stream:
            got.append(record.item.id)
    assert got == ["r-1", str(2 ** 70), "r-\u00e9", "r-4"] and gc.isenabled()
