"""The reference scheduler: pure decisions, no I/O, no clock reads."""
