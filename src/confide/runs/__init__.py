"""A run on disk and the loops that fill it.

:mod:`.stored` a stored run (:class:`Run`: its records and table) and
:func:`generate_and_evaluate`; :mod:`.execution` the run loop (plan -> blocks -> store, resumable);
:mod:`.ray_executor` the same blocks on Ray workers; :mod:`.importing` another tool's log
made a run (:mod:`.import_workers` scores it, here or in worker processes);
:mod:`.labels` correctness labels added later; :mod:`.claims` the claim stage.
"""
