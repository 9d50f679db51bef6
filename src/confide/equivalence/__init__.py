"""When do two answers mean the same thing? Equivalence judges and their clusters.

:mod:`.clustering` holds the :class:`~confide.equivalence.clustering.Judge` interface and
the one clustering routine, :mod:`.judges` the registered judges (exact, numeric, ast,
embedding, nli, llm), :mod:`.summary` a sentence that describes the clusters.
"""
