"""The words every stage shares: items, generations and records; the error tree; the
generic registry; the valid range of every option; number formats; output paths; the
one JSON-safe conversion (NaN and infinity to null, numpy to Python).

Nothing here imports another stage of confide.
"""
