"""Framework integrations: the only modules that import an agent framework (optional extras).

``agentgate.integrations.langgraph`` needs the ``langgraph`` extra: ``pip install 'agentgate-middleware[langgraph]'``.
"""
