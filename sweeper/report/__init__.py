"""Turning an experiment's rows into what people read: tables, figures, the report.

Owns rendering the envelope for the terminal and files (`render`), the report's tables
(`tables`) and figures (`figures`) and building the whole report (`build`). May import
`sweeper.results`, `sweeper.plan` and `trainables`; never run, ingest or cli.
"""
