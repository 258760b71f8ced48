"""Importing published certification logs into an experiment (`sweeper import DIR`).

Owns finding the logs and reading their hyperparameters from their paths (`importer`) and
reading one log, streamed and checked row by row (`log_reader`). May import
`sweeper.results` (the layout and row tables it writes) and `trainables`; never plan, run,
report or cli.
"""
