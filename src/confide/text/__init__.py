"""Reading answer text: normalisation, word overlap, final numbers, function calls, embeddings.

The graders (:mod:`confide.grading`) and the equivalence judges
(:mod:`confide.equivalence.judges`) both read answers; what they share lives here, below
both, so "the same answer" means one thing everywhere.
"""

from confide.text.calls import Call, canonical_calls, parse_function_calls
from confide.text.embeddings import embed_texts
from confide.text.normalize import (
    answer_key,
    answer_tokens,
    collapse_whitespace,
    normalize_answer,
    rouge_tokens,
)
from confide.text.numbers import extract_final_number
from confide.text.similarity import rouge_l_f1, token_f1

__all__ = ["Call", "answer_key", "answer_tokens", "canonical_calls", "collapse_whitespace",
           "embed_texts", "extract_final_number", "normalize_answer", "parse_function_calls",
           "rouge_l_f1", "rouge_tokens", "token_f1"]
