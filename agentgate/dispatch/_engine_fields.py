"""The engine fields of a chat body that neither the dispatcher nor the gateway passes on
(``check_engine_fields``), each refused with a ``FieldError`` naming it: fields that ask for more
than one choice, an output limit other than the one reserved, or something the call was not
decided on. One definition, read by ``Dispatcher.route_request`` (so ``Dispatcher.chat``,
``stream`` and ``Gate.dispatch``) and by the gateway's ``_parse_body``: until review R84 the
gateway refused them and a call through the dispatcher alone was debited for one answer of
``max_tokens`` while its backend generated ``n`` (docs/gateway.md, 'Errors'; docs/dispatch.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentgate.errors import InputError

ONE_CHOICE = ("n", "best_of", "n_cmpl")
"""Body fields that ask a backend for several sequences (vLLM honours ``n`` and ``best_of``,
llama.cpp ``n_cmpl``, of which its ``n`` is the alias): absent, null or 1."""
OTHER_LIMITS = ("n_predict",)
"""Body fields that name an output limit neither reads, which an engine reads over ``max_tokens``
(llama.cpp's OpenAI chat route takes ``n_predict`` first, ``null`` and ``-1`` as no limit):
refused whatever their value, as the limit signed, reserved, debited and sent is ``max_tokens``."""
STEERING = {
    "lora": "llama.cpp's per-request LoRA adapters: another model than the one granted",
    "lora_path": "SGLang's LoRA adapter: another model than the one granted",
    "id_slot": "llama.cpp's slot, with the conversation cached in it",
    "session_params": "SGLang's session: another request's prompt and output, or its end",
    "kv_transfer_params": "vLLM's disaggregated serving: KV cache of another request",
    "ec_transfer_params": "vLLM's disaggregated serving: encoder cache of another request",
    "bootstrap_host": "SGLang's prefill-decode disaggregation: KV cache of another request",
    "bootstrap_port": "SGLang's prefill-decode disaggregation: KV cache of another request",
    "bootstrap_room": "SGLang's prefill-decode disaggregation: KV cache of another request",
    "input_ids": "SGLang's prompt token ids, run instead of the messages",
    "chat_template": "vLLM's chat template, written by the caller: the prompt the messages become",
    "custom_logit_processor": "SGLang's serialized Python logit processor: code the backend runs",
    "logits_processors": "vLLM's logits processors by qualified name: classes the backend constructs",
    "vllm_xargs": "vLLM's extra arguments: read as kv_transfer_params, or by any extension installed",
    "rid": "SGLang's request id: another request's, to collide with or stand for",
    "request_id": "vLLM's request id: another request's, to collide with or stand for",
}
"""Engine body fields with which a caller picks what the decision never named (an adapter, i.e. a
model other than the one its ``model:`` capability grants and the router routed for; another
request's, perhaps another tenant's, cached state; a prompt other than the messages estimated and
debited), each with what it reaches: refused unless null, which every engine reads as the field
left out. Sampling fields steer nothing the decision named and pass (docs/gateway.md, 'Errors')."""
TEMPLATE_ARGUMENTS = {
    "chat_template": "the template itself, as the refused field 'chat_template' (GHSA-6fvq-23cw-5628)",
    "tokenize": "tokenizing where the server renders text (GHSA-69j4-grxj-j64p)",
}
"""Keys of ``chat_template_kwargs`` that vLLM before 0.11 merged over its own arguments to
``apply_chat_template``, each with what it reaches: refused, as the backend's version is not
known here. Other keys are the template's own switches (``enable_thinking``) and pass."""


class FieldError(InputError):
    """A chat completion body refused for one field: ``param`` names it as OpenAI's error body
    does (``"max_tokens"``, ``"messages.[0].role"``), and the gateway's 400 carries it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def check_engine_fields(body: Mapping[str, Any]) -> None:
    """Raise ``FieldError`` naming the first field of ``body`` refused: one of ``ONE_CHOICE``
    other than absent, null or 1 (``1.0`` is 1, ``true`` is refused), one of ``OTHER_LIMITS``
    present, one of ``STEERING`` other than null, or a ``chat_template_kwargs`` that is neither
    an object nor null or that holds a key of ``TEMPLATE_ARGUMENTS``."""
    # Several choices would generate several times the output the invocation signs, the
    # reservation holds and the tenant's bucket is debited (and a grant's max_tokens caps per
    # choice): one choice per call.
    for name in ONE_CHOICE:
        if body.get(name) not in (None, 1) or isinstance(body.get(name), bool):
            raise FieldError(name, f"'{name}' must be 1: one choice per call")
    # Until review R66 a gateway body with ``max_tokens: 8`` and ``n_predict: 100000`` was
    # reserved for 8 tokens, and a llama.cpp backend generated 100,000 (charged at most the 8).
    for name in OTHER_LIMITS:
        if name in body:
            raise FieldError(
                name,
                f"'{name}' is not taken: the output limit is max_tokens (or max_completion_tokens), "
                "which the invocation signs and the budget reserves",
            )
    # Until review R66 the gateway passed these on: a llamacpp backend ran ``lora: [{"id": 1,
    # ...}]`` on an adapter no grant named, an SGLang one continued another request's session
    # (until review R67 ``vllm_xargs``, ``rid`` and ``request_id`` too: vLLM reads a request's
    # ``kv_transfer_params`` from the dict ``vllm_xargs`` becomes; until review R87 vLLM's
    # ``logits_processors``, which SGLang's ``custom_logit_processor`` was refused beside).
    for name, reaches in STEERING.items():
        if body.get(name) is not None:
            raise FieldError(
                name, f"'{name}' is not taken: it picks what the call was not decided on ({reaches})"
            )
    _check_template_kwargs(body.get("chat_template_kwargs"))


def _check_template_kwargs(kwargs: object) -> None:
    """Raise ``FieldError`` for ``chat_template_kwargs`` that is neither an object nor null (vLLM
    refuses it with a 400), or that holds a key of ``TEMPLATE_ARGUMENTS``. Until review R67
    ``{"chat_template": ...}`` passed the refusal of ``chat_template`` by this other door."""
    if kwargs is None:
        return
    if not isinstance(kwargs, Mapping):
        raise FieldError("chat_template_kwargs", "'chat_template_kwargs' must be an object or null")
    for name, reaches in TEMPLATE_ARGUMENTS.items():
        if name in kwargs:
            raise FieldError(
                "chat_template_kwargs",
                f"'chat_template_kwargs' may not hold '{name}': it reaches {reaches}; "
                "only the server's template's own switches (such as enable_thinking) are taken",
            )
