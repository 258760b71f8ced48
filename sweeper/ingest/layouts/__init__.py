"""The directory layouts of the reference code, one module each: which path names it writes
and the hyperparameters they mean. `sweeper.ingest.path_names` reads a log's path with all of
them."""
