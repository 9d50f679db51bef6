"""One question's way to a record: the run plan, then generate -> record -> score -> grade.

:mod:`.plan` checks a run's settings before any model loads (:class:`RunPlan`);
:mod:`.answering` generates and turns one generation into a scored, graded record
(:class:`Pipeline`); :mod:`.streaming` does it token by token, with early abstention.
"""
