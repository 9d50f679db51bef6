"""From scored, graded records to numbers: the table of a run and the claim table.

:mod:`.table` one row per scorer with every metric and its interval, the comparison to
the best scorer and the length audit; :mod:`.claims` the same over claims;
:mod:`.selfreflect` how faithfully a summary describes the sampled answers.
"""
