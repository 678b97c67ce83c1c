"""The OpenAI-compatible gateway: chat completions for any OpenAI client, under agentgate's authority.

Server: ``Gateway(GatewayGate(policy, store), inventory).app`` (ASGI), served by
``GatewayServer`` or ``agentgate serve``. Client: ``InvocationSigner(key, chain)`` (an httpx hook
for ``openai`` and ``ChatOpenAI``) or ``invocation_headers(key, chain, body)``. docs/gateway.md.
"""

from __future__ import annotations

from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.gateway._app import Gateway
from agentgate.dispatch.gateway._authority import (
    APPROVAL_HEADER,
    CallerIdentity,
    GatewayDecision,
    GatewayGate,
)
from agentgate.dispatch.gateway._client import (
    DEFAULT_MAX_TOKENS,
    INVOCATION_HEADER,
    InvocationSigner,
    chat_call,
    invocation_headers,
    max_tokens_of,
    priority_of,
)
from agentgate.dispatch.gateway._errors import error_response
from agentgate.dispatch.gateway._server import GatewayServer

__all__ = [
    "APPROVAL_HEADER",
    "DEFAULT_MAX_TOKENS",
    "INVOCATION_HEADER",
    "CallerIdentity",
    "FieldError",
    "Gateway",
    "GatewayDecision",
    "GatewayGate",
    "GatewayServer",
    "InvocationSigner",
    "chat_call",
    "error_response",
    "invocation_headers",
    "max_tokens_of",
    "priority_of",
]
