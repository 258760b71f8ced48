"""The names of the ways a model is run, shared by the settings that choose them (the driver's
spaces and flags) and the code that runs them (`trainables.runtime`,
`trainables.empirical_robustness`)."""

PRECISIONS = ("fp32", "bf16", "fp16")  # certification; training's `amp` uses off for fp32
ESTIMATORS = ("plugin", "stein")  # the empirical attack's gradient: autograd, or no-gradient
