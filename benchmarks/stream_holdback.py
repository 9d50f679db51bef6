"""What holding streamed tokens back for the early-abstention check costs, per token.

With an early-abstention policy, :class:`confide.pipeline.streaming.AnswerStream` hands a
token of the greedy answer on only after the running confidence has been
checked with it: tokens 1 .. after-1 wait for token ``after``; later tokens
wait for their own check. This script measures both parts in one process:

1. the callback alone, on synthetic token events: time per token without a
   policy, and with one that never fires (the check, then the hand-on);
2. the bundled model (hf backend) answering a few bundled TriviaQA questions,
   token by token, with and without the policy: for each token position, the
   time from the backend reporting the token to the token reaching the sink
   (the stream's reader), and the model's time per token.

    .venv/bin/python benchmarks/stream_holdback.py --items 4 --after 4

Measured on the shared 2-core CPU (SmolLM2 bfloat16, ``--items 4 --after 4
--max-new-tokens 24``, while other jobs shared the cores): the callback takes
13.6 µs per token without a policy and 14.3 µs with one (+0.7 µs: the check
now runs before the token is handed on). From the model's report to the sink,
tokens 4 to 24 took 0.06-0.10 ms with the policy as without it; tokens 1, 2
and 3 waited 2866, 2002 and 1048 ms, that is 3, 2 and 1 token times (about 1 s
per token on the loaded CPU; ~45 ms per token when the machine is idle): the
wait is ``after - t`` token times for token ``t < after`` and nothing after.
"""

from __future__ import annotations

import argparse
import math
import time


def _synthetic(n: int, after: int) -> tuple[float, float]:
    from confide.backends.base import TokenEvent
    from confide.pipeline.streaming import AnswerStream, EarlyAbstention

    timings = []
    for early in (None, EarlyAbstention(1e-9, after=after)):
        stream = AnswerStream(lambda update: None, early=early)
        events = [TokenEvent(0, None, "ab" * min(i + 1, 32), "ab", math.log(0.9), 0.5)
                  for i in range(n)]
        start = time.perf_counter()
        for event in events:
            stream(event)
        timings.append((time.perf_counter() - start) / n * 1e6)
    return timings[0], timings[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=4)
    parser.add_argument("--after", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--synthetic", type=int, default=20_000)
    args = parser.parse_args(argv)

    plain, held = _synthetic(args.synthetic, args.after)
    print(f"callback per token: {plain:.2f} µs without a policy, {held:.2f} µs with one "
          f"(+{held - plain:.2f} µs)")

    from confide.backends.base import GenerationSpec
    from confide.backends.hf import HFBackend
    from confide.pipeline.streaming import AnswerStream, EarlyAbstention
    from confide.tasks import load_task

    backend = HFBackend("smollm2", batch_size=1)
    task = load_task("triviaqa", limit=args.items)
    prompts = [task.render(it, chat=backend.has_chat_template) for it in task.items]
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens)  # no stop: full-length answers
    delays: dict[str, dict[int, list[float]]] = {"none": {}, "policy": {}}
    token_times: list[float] = []
    for label, early in (("none", None), ("policy", EarlyAbstention(1e-9, after=args.after))):
        for q, prompt in enumerate(prompts):
            reported: list[float] = []
            arrived: list[tuple[int, float]] = []

            def sink(update, arrived=arrived):
                arrived.append((update.n_tokens, time.perf_counter()))

            stream = AnswerStream(sink, early=early, stop=spec.stop)

            def hook(event, stream=stream, reported=reported):
                reported.append(time.perf_counter())
                return stream(event)

            backend.generate([prompt], spec, [q], on_token=hook)
            now = time.perf_counter()
            arrived += [(u.n_tokens, now) for u in stream.finish()]
            for n, at in arrived:
                delays[label].setdefault(n, []).append((at - reported[n - 1]) * 1e3)
            if label == "none" and len(reported) > 1:
                token_times += [(b - a) * 1e3 for a, b in zip(reported, reported[1:], strict=False)]
    per_token = sum(token_times) / len(token_times)
    print(f"model: {per_token:.1f} ms per token ({len(token_times)} gaps)")
    print("token  delay without policy (ms)  delay with policy (ms)")
    for n in sorted(delays["policy"]):
        a, b = delays["none"].get(n, [math.nan]), delays["policy"][n]
        print(f"{n:5d}  {sum(a) / len(a):24.3f}  {sum(b) / len(b):22.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
