"""The ``hf`` backend: transformers models on CPU or GPU, with token statistics
computed from the logits while generating.

We run our own decoding loop over the model's KV cache instead of
``model.generate``, for four reasons:

- each step's logits are reduced at once to the statistics scorers need
  (chosen-token log-probability, entropy, KL, Rényi and Fisher–Rao divergences
  from uniform, the chosen token's BoostedProb, top-k alternatives)
  and then dropped, so memory stays flat even for 262k-token vocabularies and
  no second forward pass over the answer is ever needed;
- those logits come from a float32 output projection whatever the model's
  dtype, so a bfloat16 model's statistics are not rounded to bfloat16's 8-bit
  mantissa (which moved log-probabilities by up to 0.06 nats);
- a question's prompt is encoded once and its key/value cache shared by the
  greedy row and the k sampled rows; a row that finished leaves the batch at
  once and a waiting row takes its place (continuous batching: caches of
  different widths are left-padded and stacked), so a batch never runs at
  the speed of its longest answer;
- each sampled row has its own random generator, seeded from (run seed, item
  id), so an item's samples never depend on its batch neighbours.

The package, one concept per module:

====================================  ==========================================================
:mod:`~confide.backends.hf.backend`   :class:`HFBackend`: loading, float32 head, prompts
:mod:`~confide.backends.hf.decoding`  the decoding loop: rows, prefills, continuous batching
:mod:`~confide.backends.hf.steps`     each step's statistics and token choice (top-p)
:mod:`~confide.backends.hf.cache`     key/value cache plumbing
:mod:`~confide.backends.hf.passes`    extra forward passes: next token, unconditioned, attention
:mod:`~confide.backends.hf.tuning`    dtype and rows per step, measured once per machine
:mod:`~confide.backends.hf.members`   ensemble members' files; all members in one pass
:mod:`~confide.backends.hf.ensemble`  members in a run: every answer teacher-forced under each
====================================  ==========================================================
"""

from confide.backends.hf.backend import HFBackend
from confide.backends.hf.decoding import MIN_SHARED_PREFIX
from confide.backends.hf.decoding import common_prefix as _common_prefix
from confide.backends.hf.steps import divergences_from_uniform as _divergences_from_uniform
from confide.backends.hf.steps import nucleus_draw as _nucleus_draw
from confide.backends.hf.tuning import choose_dtype

__all__ = ["HFBackend", "choose_dtype"]

# MIN_SHARED_PREFIX and the three private names stay importable from here, where tests and
# benchmarks have imported them; MIN_SHARED_PREFIX is read in (and patched on)
# confide.backends.hf.decoding. Listed in __all__ as the deliberate re-exports they are.
__all__ += ["MIN_SHARED_PREFIX", "_common_prefix", "_divergences_from_uniform", "_nucleus_draw"]
