"""A run's SQLite file (:mod:`.run_store`) and its exports (:mod:`.exports`)."""
