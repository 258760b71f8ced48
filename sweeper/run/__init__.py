"""Running a plan on Ray: training trials with Ray Tune and the sharded stages after them.

Owns the launcher (`launch`; its settings `launch_options`, read without Ray), what the
cluster can host (`capacity`), the sharded-stage engine (`shards`: shards, tasks, progress;
`stage`: what a stage is; `compaction`: a model's shards folded into one verified file) and
its two stages, certification (`certify_stage`, finished for DDRS by `ddrs_memory`) and the
empirical attack (`empirical_stage`), the nodes' version check (`versions`), what a run holds
and leaves (`driving`, `sweep_run`, `outcome`), and the statistics of envelope-aware
certification (`envelope_bounds`, `envelope_ledger`, `envelope_planner`: pure; `envelope_run`:
its driver loop, with `envelope_completion`'s tie completions).
May import `sweeper.plan`, `sweeper.results` and `trainables`; never report, ingest or cli.
"""
