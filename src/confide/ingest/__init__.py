"""Score what you already have: read generations from other tools' logs.

:func:`read_generations` streams a log file into :class:`Imported` records (an
:class:`~confide.core.records.Item`, the greedy answer, the samples, a label and the
statistics they provide), one at a time, so a 100,000-line log never sits in
memory (a JSON array is streamed too: see :mod:`confide.ingest.common`).

Formats (each module's docstring holds its field map):

==============  ===============================================================
``openai``      Chat Completions / Completions responses, Batch API output
                lines, logging proxies' ``{"request", "response"}`` pairs
                (:mod:`confide.ingest.openai`)
``vllm``        vLLM offline ``RequestOutput`` dumps (:mod:`confide.ingest.vllm`)
``llamacpp``    llama.cpp server ``/completion`` replies, Ollama replies
                (:mod:`confide.ingest.llamacpp`)
``lmeval``      lm-evaluation-harness ``--log_samples`` records
                (:mod:`confide.ingest.lmeval`)
``jsonl``       confide's own minimal form (:mod:`confide.ingest.jsonl`)
==============  ===============================================================

``format="auto"`` (:func:`detect_format`) decides from the first record: it must have
the required fields of exactly one format (a record that fits two is refused, naming
both, rather than read the wrong way); :func:`detect` also says which fields decided,
and the stream's :attr:`ImportedStream.format` says which it chose. Logs compressed
with gzip, bzip2 or xz are read as they are (:mod:`confide.ingest.sources`).

What a record can and cannot give: chosen-token log-probabilities
(``token_logprobs``) and top-k alternatives (``top_logprobs``) where the log holds
them; entropies only as **lower bounds** from the top-k (``token_entropies``,
marked in :attr:`Imported.approximate`, the ``vllm`` backend's rule); never the
statistics that need the whole next-token distribution (``token_kl_uniform``,
``token_renyi_uniform``, ``token_fisher_rao_uniform``, ``token_boosted_prob``), nor
hidden states. Each
record says what it provides in :attr:`Imported.capabilities`.

Bad records raise :class:`~confide.core.errors.InvalidInputError` naming
``file:line: field:``; with ``on_bad_record="skip"`` they are skipped, and
:attr:`ImportedStream.skipped` lists ``(file:line, reason)``.
"""

from confide.ingest.reading import (
    ANSWER_MODES,
    DETECTION_ORDER,
    FORMATS,
    Imported,
    ImportedStream,
    decode_line,
    detect,
    detect_format,
    duplicate_id,
    file_layout,
    is_blank,
    option_probability,
    parse_value,
    parse_values,
    read_generations,
)

__all__ = ["ANSWER_MODES", "DETECTION_ORDER", "FORMATS", "Imported", "ImportedStream",
           "decode_line", "detect", "detect_format", "duplicate_id", "file_layout", "is_blank",
           "option_probability", "parse_value", "parse_values", "read_generations"]
