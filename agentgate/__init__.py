"""agentgate: decides what an AI agent may run, when, where, and under whose authority."""
