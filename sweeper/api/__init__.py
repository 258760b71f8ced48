"""The front door: `sweeper.Sweep`, the Python API of a sweep (as Ray's `Tuner` is Tune's).

Owns the one object a notebook or a script drives a sweep with (`sweep`: plan it, price it,
run it, certify it, attack it, compact it, import logs into it, read its status; `space_arg`:
the space it takes, a name, a file or a dict), what a read returns (`reading`: a `Reading`,
as Tune's `ResultGrid`, with every view of the results: envelope, per-model table, report,
coverage, and per trial a `TrialResult`), the reading of an experiment's rows as the commands
select them (`selection`: `--only`, the models awaiting their memory pass, what was read) and
the names its callers pass and catch (`surface`). Every `sweeper` command parses its options,
calls this and renders what it returns. May import `sweeper.plan`, `sweeper.run`,
`sweeper.results`, `sweeper.report` and `sweeper.ingest`; never cli. Returns data and logs
with `logging`; never prints.
"""
