"""Importing published certification logs into an experiment (`sweeper import DIR`).

Owns reading one log, streamed and checked row by row (`log_reader`), the hyperparameters a
log's path names (`path_names`, with one module per reference code's layout in `layouts/`),
the `--set` values (`sets`), and finding, checking and writing the logs (`importer`). May
import `sweeper.results` (the layout and row tables it writes) and `trainables`; never plan,
run, report or cli.
"""
