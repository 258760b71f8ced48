"""Search spaces shipped with sweeper: one YAML file per named space (see `sweeper spaces`)."""
