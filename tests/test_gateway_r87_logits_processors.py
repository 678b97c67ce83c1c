"""Review R87: vLLM's ``logits_processors`` is refused, as SGLang's ``custom_logit_processor`` is.

Both let a caller make the backend construct processor classes of its choosing: vLLM imports each
qualified name listed (a string, or an object with ``qualname``, ``args`` and ``kwargs``) and
constructs it, where it was started with a ``--logits-processor-pattern`` matching the name.
SGLang's field was refused since review R66; vLLM's was passed on. Over real HTTP on 127.0.0.1,
with the counting hostile backend of ``test_gateway_r66_output_limit_fields``, and through the
dispatcher alone, which refuses what the gateway refuses."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import test_gateway_r66_output_limit_fields
from test_dispatch_r84_engine_fields import _refused
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service
from test_gateway_r66_output_limit_fields import _Counting

PROCESSORS: list[Any] = [
    ["my_module.MyLogitsProcessor"],
    [{"qualname": "os.system", "args": ["true"]}],
    [],
]
"""Values of ``logits_processors``: vLLM's two forms of a processor, and none (the rule is the
field present, as for every field that steers the engine)."""

counting = test_gateway_r66_output_limit_fields.counting  # the fixtures, shared: a module's own instances
env = test_gateway_r66_output_limit_fields.env


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("value", PROCESSORS)
def test_vllm_logits_processors_are_refused_before_the_call_is_decided(
    env: Env, counting: _Counting, value: Any, stream: bool
) -> None:
    _in_service(env)
    spent, count, asked = env.spent(), len(env.outcomes()), counting.asked
    answer = env.post({**_body(stream=stream), "logits_processors": value})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "logits_processors" and error["code"] == "invalid_request", error
    assert "'logits_processors'" in error["message"], error
    assert counting.asked == asked, "the call was sent to the backend"
    assert env.spent() == spent and env.held() == []
    assert len(env.outcomes()) == count


def test_logits_processors_null_is_the_field_absent(env: Env, counting: _Counting) -> None:
    _in_service(env)
    asked = counting.asked
    answer = env.post({**_body(), "logits_processors": None})
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1


@pytest.mark.parametrize("verb", ["chat", "stream"])
def test_the_dispatcher_refuses_logits_processors_before_any_debit(verb: str) -> None:
    error, router = asyncio.run(_refused(verb, {"logits_processors": ["my_module.MyLogitsProcessor"]}))
    assert error.param == "logits_processors" and "'logits_processors'" in str(error)
    assert "t" not in router._buckets  # never routed: its tenant's bucket was never touched
