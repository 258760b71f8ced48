"""Planning a sweep before Ray starts: the space, the grid, the plan and its price.

Owns the typed space and its settings (`spec`, each setting declared once with
`trainables.kernel.settings`; `run_settings`: how the base classifier runs), reading a space's
YAML file into one (`spaces`) or a dict, `Sweep(param_space=...)`, by the same reading
(`param_space`), expanding the grid into trial configs and selecting a slice (`grid`),
checking a run's request against the data, the address and the experiment on storage
(`sweep_plan`), and the dry run's cost estimate (`cost`, `throughput`). May import
`sweeper.results` (to read how far an experiment got) and `trainables`; never run, report,
ingest or cli. No torch, no Ray.
"""
