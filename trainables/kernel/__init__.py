"""The torch-free kernel: what the driver (`sweeper`) and the workers (the rest of
`trainables`) share, defined once and importing neither torch nor Ray, so that planning,
validation and every read command stay light. See ARCHITECTURE.md."""
