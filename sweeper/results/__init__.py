"""The experiment on storage, the foundation every stage writes to or reads from.

Owns the layout of an experiment (`storage`: the only module that spells paths), the lease (one
driver per experiment), the Parquet row tables and their schemas (`rows`), reading a stage's
rows validated and cached (`reader`), the certified-accuracy envelope (`envelope`) and an
experiment's status (`status`). May import `trainables` (its config and file helpers) and
nothing else of `sweeper`: plan, run, report, ingest and cli all build on it.
"""
