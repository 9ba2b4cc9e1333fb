"""Test doubles made of real components: a fake Slack HTTP server and synthetic workloads."""
