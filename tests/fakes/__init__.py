"""Test doubles made of real components: recording HTTP servers and synthetic workloads."""
