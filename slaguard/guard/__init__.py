"""The guard line: detectors, breaker and fleet-mode state machine (pure, clock passed in)."""
