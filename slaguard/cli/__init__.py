"""Command-line adapters: parse arguments, call the core, print results."""
