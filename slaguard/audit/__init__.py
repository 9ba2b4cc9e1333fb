"""The audit line: every routing decision in SQLite or PostgreSQL, nothing lost.

`records` (what producers build, no I/O), `writer` (background batch writer with a spill
journal), `store` (mode switches, incidents, weights), `service`, `group_stats` and
`incident_timeline` (postmortem queries), `migrate` (Alembic). Importing this package
imports nothing heavy; see docs/audit.md.
"""
