"""The experiment on storage, the foundation every stage writes to or reads from.

Owns the layout of an experiment (`storage`: the only module that spells paths), the lease
(one driver per experiment), what a sharded stage's rows are (`stage_table`), the two stages'
row tables (`rows`: certification, `attack_rows`: the empirical attack), reading a stage's
rows validated and cached (`reader`), the certified-accuracy envelope (`envelope`) and an
experiment's status (`status`). May import `trainables` (its config and file helpers) and
nothing else of `sweeper`: plan, run, report, ingest and cli all build on it.
"""
