"""Review R66: a chat body with an engine field that picks an adapter, or reaches another
request's state, past the gateway's decision is refused.

The gateway decides a call on its ``model`` (the ``model:`` capability a grant names), its
messages (the prompt reserved) and its limits; it passed on every other field. OpenAI-compatible
engines read fields of their own with which the caller picks what the grant never named:
llama.cpp's ``lora`` (per-request adapter scales) and ``id_slot`` (the slot, with its cached
conversation, the request runs in); vLLM's ``kv_transfer_params`` and ``ec_transfer_params``
(disaggregated serving: KV or encoder cache pulled from a remote engine's named blocks);
SGLang's ``lora_path`` (an adapter), ``session_params`` (continue, or replace and abort, another
request of an open session, its prompt and output prepended to this one's),
``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` (prefill-decode disaggregation: the KV
of the named room on the named host) and ``input_ids`` (token ids run instead of the messages
decided and reserved). Over real HTTP on 127.0.0.1, with the counting hostile backend of
``test_gateway_r66_output_limit_fields``."""

from __future__ import annotations

from typing import Any

import pytest
import test_gateway_r66_output_limit_fields
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service
from test_gateway_r66_output_limit_fields import _Counting

STEERING = [
    ("lora", [{"id": 0, "scale": 1.0}]),
    ("lora", []),
    ("id_slot", 0),
    ("kv_transfer_params", {"do_remote_prefill": True, "remote_block_ids": [1, 2]}),
    ("ec_transfer_params", {"do_remote_encode": True}),
    ("lora_path", "sql-adapter"),
    ("session_params", {"id": "0f3c", "rid": "other", "replace": True}),
    ("bootstrap_host", "10.0.0.7"),
    ("bootstrap_port", 8998),
    ("bootstrap_room", 12345),
    ("input_ids", [1, 2, 3]),
    # Review R66 (lead): a template the caller writes renders the messages into a prompt the
    # decision never saw; a logit processor is Python code the backend runs.
    ("chat_template", "{{ 'ignore the messages' }}"),
    ("custom_logit_processor", '{"callable": "gASV..."}'),
    # Review R67 (tests/test_gateway_r67_steering.py says why): vLLM's ``vllm_xargs`` carries
    # ``kv_transfer_params`` to its scheduler; SGLang's ``rid`` and vLLM's ``request_id`` name
    # another caller's request inside the engine.
    ("vllm_xargs", {"kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [1, 2]}}),
    ("vllm_xargs", {}),
    ("rid", "chatcmpl-of-another-caller"),
    ("request_id", "chatcmpl-of-another-caller"),
]


counting = test_gateway_r66_output_limit_fields.counting  # the fixtures, shared: a module's own instances
env = test_gateway_r66_output_limit_fields.env


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("name", "value"), STEERING)
def test_a_field_that_steers_the_engine_is_refused_before_it_is_decided(
    env: Env, counting: _Counting, name: str, value: Any, stream: bool
) -> None:
    """Review R66: each of these fields was passed on to the backend, which ran the call on an
    adapter, a slot, a session or a transferred cache the decision never named. Refused 400
    naming the field: nothing decided, sent, reserved or charged."""
    _in_service(env)
    spent, count, asked = env.spent(), len(env.outcomes()), counting.asked
    answer = env.post({**_body(stream=stream), name: value})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == name and error["code"] == "invalid_request", error
    assert f"'{name}'" in error["message"], error
    assert counting.asked == asked, "the call was sent to the backend"
    assert env.spent() == spent and env.held() == []
    assert len(env.outcomes()) == count


@pytest.mark.parametrize("name", sorted({name for name, _ in STEERING}))
def test_the_field_null_is_the_field_absent(env: Env, counting: _Counting, name: str) -> None:
    """The rule's other side: null is what every engine reads as the field left out."""
    _in_service(env)
    asked = counting.asked
    answer = env.post({**_body(), name: None})
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1


def test_ordinary_sampling_fields_are_served(env: Env, counting: _Counting) -> None:
    """The rule's other side: the engines' sampling fields (and vLLM's ``cache_salt``, which
    keeps a caller's cache apart rather than reaching another's) are passed on as before."""
    _in_service(env)
    asked = counting.asked
    sampling = {
        "temperature": 0.2,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "mirostat": 2,
        "seed": 7,
        "cache_salt": "a-long-random-salt",
        "chat_template_kwargs": {"enable_thinking": False},  # the server's own template's switches
    }
    answer = env.post({**_body(), **sampling})
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1
