"""The vllm backend on a GPU machine: an end-to-end run, and its throughput against raw vLLM.

Run through ``benchmarks/gpu/vllm_check.sh`` (which bounds it to 8 minutes). Needs no
network: the model is ``--model DIR`` (a transformers directory), else the bundled
SmolLM2 when its package is installed, else random weights of SmolLM2-135M's Llama
architecture with a byte-level tokenizer built here (the answers are noise, but the
engine, the token statistics and the throughput are real).

Prints: what the machine has; the throughput of raw vLLM on the same requests confide
sends (greedy + 10 seeded samples per prompt, 20 log-probabilities per token) and of
plain vLLM (same prompts, no log-probabilities, the 10 samples as one ``n=10`` request);
then confide's full run (generate, convert, score, grade, store) on those prompts, its
ratio to both (target: >= 0.9 against the same requests), and two checks: a resumed run
generates nothing, and a second generation of the same items gives the same samples.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str]:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "vllm": _version("vllm"), "transformers": _version("transformers"),
            "cuda": str(torch.cuda.is_available())}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def random_model(target: Path) -> Path:
    """SmolLM2-135M's architecture with random weights and a byte-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>",
                                        bos_token="<|im_start|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def pick_model(given: str | None, scratch: Path) -> tuple[str, str]:
    if given:
        return given, "given"
    try:
        from confide.backends.models import resolve_model

        return resolve_model("smollm2").path, "bundled SmolLM2-135M-Instruct"
    except Exception as exc:  # the bundled model's package is absent: random weights
        print(f"bundled model unavailable ({type(exc).__name__}); random weights")
        return str(random_model(scratch / "random-llama")), "random weights (Llama, 135M)"


def timed_generate(llm, prompts, params) -> tuple[float, int]:
    began = time.perf_counter()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    seconds = time.perf_counter() - began
    return seconds, sum(len(c.token_ids) for o in outputs for c in o.outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="a local transformers model directory")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--out", default=None, help="folder for the run (default: a temp dir)")
    args = parser.parse_args()
    print(json.dumps(machine(), indent=1))
    if _version("vllm") == "not installed":
        sys.exit("vLLM is not installed here: nothing to check")

    from vllm import SamplingParams

    from confide.backends.base import GenerationSpec, item_seed
    from confide.backends.vllm import STATS_LOGPROBS, VLLMBackend, request_plan
    from confide.pipeline.plan import RunConfig
    from confide.runs.execution import execute
    from confide.tasks import load_task

    scratch = Path(args.out or tempfile.mkdtemp(prefix="confide-vllm-"))
    scratch.mkdir(parents=True, exist_ok=True)
    model, kind = pick_model(args.model, scratch)
    print(f"model: {model} ({kind})")
    began = time.perf_counter()
    backend = VLLMBackend(model, gpu_memory_utilization=0.5, max_model_len=2048)
    print(f"engine ready in {time.perf_counter() - began:.1f} s; config {backend.config()}")

    config = RunConfig(backend="vllm", model=model, task="triviaqa", limit=args.items,
                       n_samples=args.samples, max_new_tokens=args.max_new_tokens,
                       batch_size=args.items)  # one block: vLLM schedules it whole
    task = load_task("triviaqa", limit=args.items)
    spec = GenerationSpec(max_new_tokens=args.max_new_tokens, stop=tuple(task.stop),
                          n_samples=args.samples)
    prompts = [{"prompt_token_ids": backend.encode(task.render(it, chat=True))}
               for it in task.items]
    seeds = [item_seed(config.seed, it.id) for it in task.items]
    plan = request_plan(spec, seeds, len(prompts), STATS_LOGPROBS)
    same = ([prompts[i] for i, _ in plan], [SamplingParams(**kw) for _, kw in plan])
    plain = (prompts + prompts,
             [SamplingParams(max_tokens=args.max_new_tokens, stop=list(task.stop),
                             temperature=0.0)] * len(prompts)
             + [SamplingParams(max_tokens=args.max_new_tokens, stop=list(task.stop),
                               n=args.samples, top_p=0.9, temperature=1.0)] * len(prompts))

    def reset() -> None:  # each measurement starts from a cold prefix cache
        if hasattr(backend.llm, "reset_prefix_cache"):
            backend.llm.reset_prefix_cache()

    backend.llm.generate(prompts[:8], SamplingParams(max_tokens=8), use_tqdm=False)  # warm-up
    reset()
    raw_s, raw_tokens = timed_generate(backend.llm, *same)
    reset()
    plain_s, plain_tokens = timed_generate(backend.llm, *plain)
    reset()
    began = time.perf_counter()
    outcome = execute(config, scratch / "run", backend=backend)
    run_s = time.perf_counter() - began
    run_rate = outcome.generated_tokens / run_s
    raw_rate, plain_rate = raw_tokens / raw_s, plain_tokens / plain_s
    print(f"\n{'what':<44}{'seconds':>9}{'tokens':>9}{'tokens/s':>10}")
    for name, s, t in (("raw vLLM, confide's requests", raw_s, raw_tokens),
                       ("plain vLLM (no logprobs, n=10 in one request)", plain_s, plain_tokens),
                       ("confide run (generate+score+grade+store)", run_s,
                        outcome.generated_tokens)):
        print(f"{name:<44}{s:>9.2f}{t:>9}{t / s:>10.0f}")
    print(f"\nconfide / raw vLLM same requests: {run_rate / raw_rate:.2f}x (target >= 0.9)")
    print(f"confide / plain vLLM:             {run_rate / plain_rate:.2f}x")
    print(f"skipped scorers: {outcome.skipped_scorers}")

    again = execute(config, scratch / "run", backend=backend)
    print(f"resume: {again.generated} item(s) generated (expected 0)")
    first = backend.generate([task.render(it, chat=True) for it in task.items[:4]], spec,
                             seeds[:4])
    second = backend.generate([task.render(it, chat=True) for it in task.items[:4]], spec,
                              seeds[:4])
    same_samples = all([s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
                       for a, b in zip(first, second, strict=True))
    print(f"same samples on a second generation of 4 items: {same_samples}")


if __name__ == "__main__":
    main()
