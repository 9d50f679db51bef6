"""Graders: from an answer and an item's references to correctness in [0, 1].

A grader is a plain function ``fn(answer, item, **options) -> float`` plus the
:func:`grader` decorator, which records it in :data:`GRADERS`; importing this
package registers every built-in grader. Every grader refuses an item without
references with :class:`~confide.core.errors.InvalidInputError` naming the item:
such items can be scored but not graded.

=====================  ==========================================================
:mod:`.base`           the registry, :func:`grade`, references and thresholds
:mod:`.lexical`        ``exact``, ``contains``, ``f1``, ``rougeL``
:mod:`.numeric`        ``numeric`` (final number)
:mod:`.choice`         ``choice`` (multiple choice)
:mod:`.calls`          ``ast`` (function calls, BFCL)
:mod:`.embedding`      ``embedding`` (sentence-embedding similarity)
:mod:`.llm`            ``llm`` (LLM-as-a-judge; formerly ``judge``) and its prompt
=====================  ==========================================================

Reading answers (normalisation, final numbers, function-call parsing,
embeddings) lives one layer down in :mod:`confide.text`, shared with the
equivalence judges; its functions are re-exported here.
"""

from confide.grading.base import GRADERS, GraderSpec, grade, grader
from confide.grading.calls import ast_match
from confide.grading.choice import choice
from confide.grading.embedding import embedding
from confide.grading.lexical import contains, exact, f1, rouge_l
from confide.grading.llm import grading_prompt, llm
from confide.grading.numeric import numeric
from confide.text import embed_texts, extract_final_number, normalize_answer, parse_function_calls

__all__ = [
    "GRADERS",
    "GraderSpec",
    "ast_match",
    "choice",
    "contains",
    "embed_texts",
    "embedding",
    "exact",
    "extract_final_number",
    "f1",
    "grade",
    "grader",
    "grading_prompt",
    "llm",
    "normalize_answer",
    "numeric",
    "parse_function_calls",
    "rouge_l",
]
