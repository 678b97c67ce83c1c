"""A call behind an approval gate that the gateway gave up while it waited in line (its SLO over:
429 ``shed``, or 503 ``no_backend``), before any backend got it, is settled as not started: its
approval request is pending again, and the same body with the same approval runs when the
answer's ``Retry-After`` says to try again (review R90b).

R90 settled so a call in line cut by its caller leaving or by the shutdown, but a call the
router gave up in line still used its approval up: the retry its 429 asked for was refused 403
``approval_not_usable`` ("Do not retry this call"), JSON and stream alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
import test_gateway_sdks
from test_gateway_r90_unsent_approval import _approval, _approved, _hold_the_only_slot, _until
from test_gateway_sdks import _gateway

from agentgate.sim import SimServer

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
sim, backend = test_gateway_sdks.sim, test_gateway_sdks.backend
# The call sent (``_approval``, ``_approved``): test_gateway_r90_unsent_approval's ``ASK`` of rank
# 0, which waits in line for a slot while its SLO lasts, then is shed.


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_call_shed_while_it_waited_in_line_keeps_its_approval(
    tmp_path: Path, sim: SimServer, backend: Any, stream: bool
) -> None:
    with _gateway(tmp_path, sim, backend, concurrency=1, slo_ttft_s=0.3) as env:
        approval = _approval(env, stream=stream)
        holder = _hold_the_only_slot(env, backend)
        with pytest.raises(openai.RateLimitError) as shed:  # its SLO ran out in line
            _approved(env.client(max_retries=0), approval, stream=stream)
        assert shed.value.code == "shed" and "Retry-After" in shed.value.response.headers
        backend.release.set()
        holder.join(10)
        _until(lambda: env.held() == 0, "a call was never settled")
        assert len(backend.bodies) == 1  # the other call's: no backend got the shed one
        (given_up, _done) = [e for e in env.entries() if e.kind == "outcome"]
        request = json.loads(approval)["request"]
        assert given_up.status == "error" and given_up.reasons[0].startswith("Shed: ")
        assert given_up.reasons[-1] == f"not started: approval request {request} is pending again"
        # The retry the 429 asked for, with the same approval: it runs, once.
        assert _approved(env.client(max_retries=0), approval, stream=stream) == "xyz"
        assert len(backend.bodies) == 2
        env.check_log()
