"""``python -m agentgate``: the ``agentgate`` command, where its script is not on ``PATH``."""

from agentgate.cli import run

run()
