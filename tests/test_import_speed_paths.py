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
