"""The ``agentgate`` command (docs/cli.md)."""
