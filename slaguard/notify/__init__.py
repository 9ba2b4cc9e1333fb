"""The notify line: incident messages to Slack (or a file / the console), off the decision path."""
