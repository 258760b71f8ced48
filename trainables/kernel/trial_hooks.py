"""What the driver and a trial's process agree on by name (the trial runs in a Ray worker and
reports through Ray Tune)."""

# Test hook: with "<trial_id>:<epoch>" in this variable of the driver's environment, that trial
# raises right after writing that epoch's checkpoint, so tests can interrupt a sweep at a known
# point. A retry or a later run resumes past that epoch and is not interrupted again.
FAULT_ENV = "SWEEPER_FAIL_AFTER_EPOCH"
