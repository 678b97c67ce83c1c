"""Drive any agentgate ``RoutingPolicy`` (the router or a baseline) from the trace replay."""

from __future__ import annotations

from collections.abc import Mapping

from agentgate._shown import quoted
from agentgate.dispatch._policy import RouteRequest, RoutingPolicy
from agentgate.dispatch.metrics import load_from_values
from agentgate.errors import InputError, NoBackend
from agentgate.sim._des import Choice, Reject, Send, Wait
from agentgate.sim.traces import TraceRequest


class PolicyDispatcher:
    """A ``ReplayDispatcher`` over a routing policy; metrics reach it as vLLM names, as scraped."""

    def __init__(self, policy: RoutingPolicy, model: str) -> None:
        self.policy = policy
        self.model = model

    def route(self, request: TraceRequest, now: float) -> Choice:
        """The policy's choice for ``request``. Raises ``InputError`` for a request whose hashes
        are of other blocks than the policy's ``block_tokens``: the policy would read each as
        one of its own (until review R66 a Mooncake trace's 512-token blocks were read as 16
        tokens each by a default router, silently). The request's id and the router's name are
        quoted as ``quoted`` does, cut at 60 characters (until review R88 whole: a 1 MB id, a 1 MB
        message)."""
        if request.hashes and request.block_tokens != self.policy.block_tokens:
            raise InputError(
                f"request {quoted(request.id, 60)}: its hashes are of {request.block_tokens}-token blocks, but the "
                f"router {quoted(self.policy.name, 60)} cuts prompts into blocks of {self.policy.block_tokens} tokens "
                f"(make it with block_tokens={request.block_tokens})"
            )
        req = RouteRequest(
            id=request.id,
            model=self.model,
            prompt_tokens=request.prompt_tokens,
            max_output_tokens=request.output_tokens,
            prefix_hashes=request.hashes,
            tenant=request.tenant,
            priority=request.priority,
            slo_ttft_s=request.slo_ttft_s,
            session=request.session,
            arrived_at=request.arrival,
        )
        try:
            plan = self.policy.route(req, now)
        except NoBackend as exc:
            return Reject(str(exc))
        if plan.action == "wait" or plan.backend is None:
            return Wait(plan.wait_s)
        return Send(plan.backend)

    def first_token(self, backend: str, request: TraceRequest, now: float) -> None:
        self.policy.first_token(request.id, now)

    def finished(self, backend: str, request: TraceRequest, now: float) -> None:
        self.policy.finished(request.id, now)

    def observe(self, backend: str, metrics: Mapping[str, float], now: float) -> None:
        self.policy.observe(backend, load_from_values(metrics, "vllm", now=now))
