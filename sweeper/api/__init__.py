"""The front door: `sweeper.Sweep`, the Python API of a sweep (as Ray's `Tuner` is Tune's).

Owns the one object a notebook or a script drives a sweep with (`sweep`: plan it, price it,
run it, certify it, attack it, read its status, envelope and per-model table; `space_arg`:
the space it takes, a name, a file or a dict) and the reading of an experiment's rows as the
commands select them (`selection`: `--only`, the models awaiting their memory pass, what was
read). Every `sweeper` command parses its options, calls this and renders what it returns.
May import `sweeper.plan`, `sweeper.run`, `sweeper.results` and `sweeper.report`; never
ingest or cli. Returns data and logs with `logging`; never prints.
"""
