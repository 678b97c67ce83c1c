"""A model's structured answer (``create_agent(..., response_format=...)``) checked for what the run's
state cannot keep: an integer beyond 64 bits (``_structured_in_range``).

The structured answer is no tool call the agent runs. Under ``ToolStrategy`` the model answers
through an artificial tool call named after the schema, which LangChain parses inside the model
call (the model node answers it, the tools node never sees it): it needs no grant, is not
decided, recorded or charged as a tool call; the model call that produced it is, as any other.
Under ``ProviderStrategy`` the answer is the model's text, parsed the same way. Either way the
parsed value lands in the run's state (``structured_response``), which LangGraph's checkpointers
store with msgpack (64-bit integers); until review R59 a schema field holding a larger integer
ended a checkpointed run in ``TypeError: Type is not msgpack serializable``, after the call was
charged."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from langchain.agents.middleware import ModelResponse
from langchain.agents.structured_output import (
    StructuredOutputValidationError,
    ToolStrategy,
)
from langchain_core.messages import AIMessage, ToolMessage
from pydantic_core import to_jsonable_python

from agentgate.errors import InputError
from agentgate.integrations.langgraph._tool_calls import _integer_text, _integers_out_of_range

R = TypeVar("R")

RETRY_TEMPLATE = "Error: {error}\n Please fix your mistakes."
"""LangChain's message to a model whose structured answer it could not parse
(``langchain.agents.factory.STRUCTURED_OUTPUT_ERROR_TEMPLATE``), kept here so that a refused
answer reads as LangChain's own."""


def _structured_in_range(response: R, response_format: object) -> R:
    """``response`` when its ``structured_response`` holds no integer beyond 64 bits (the usual
    case). Else the answer is refused as LangChain refuses one it cannot parse
    (``StructuredOutputValidationError``, its source an ``InputError`` naming the field):

    - under ``ToolStrategy`` whose ``handle_errors`` asks for a retry (the default), the same
      answer without a structured response, its artificial call answered with an error
      ``ToolMessage`` (``status="error"``) telling the model which field, so it answers again;
    - else (``handle_errors=False`` or an error type that does not match, ``ProviderStrategy``)
      the error is raised.

    Raises ``StructuredOutputValidationError`` as said."""
    if not isinstance(response, ModelResponse) or response.structured_response is None:
        return response
    found = _integers_out_of_range(_plain(response.structured_response))
    if not found:
        return response
    keys, value = found[0]
    path = "".join(f"[{k}]" if isinstance(k, int) else f"[{k!r}]" for k in keys) or "(the whole answer)"
    text = _integer_text(value)
    shown = text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"
    said = InputError(
        f"field {path} is {shown}, an integer beyond the range the run's state can hold "
        "(-2**63 < v < 2**63); give it with fewer digits, or as text"
    )
    answer = next((m for m in response.result if isinstance(m, AIMessage)), AIMessage(content=""))
    at = next((i for i, m in enumerate(response.result) if isinstance(m, ToolMessage)), None)
    name = response.result[at].name if at is not None else None
    error = StructuredOutputValidationError(name or _schema_name(response_format), said, answer)
    retry = _retry_text(response_format, error) if at is not None else None
    if retry is None or at is None:
        raise error
    answered = cast(ToolMessage, response.result[at])
    refusal = ToolMessage(retry, tool_call_id=answered.tool_call_id, name=answered.name, status="error")
    result = [*response.result[:at], refusal, *response.result[at + 1 :]]
    return cast(R, ModelResponse(result=result, structured_response=None))


def _plain(value: object) -> object:
    """``value`` (a pydantic model, a dataclass, a dict: what a schema parses to) as dicts, lists
    and scalars; an object of another kind stands for nothing (``None``)."""
    try:
        return to_jsonable_python(value, fallback=lambda _: None)
    except Exception:  # a value pydantic cannot walk: nothing found in it
        return None


def _retry_text(response_format: object, error: StructuredOutputValidationError) -> str | None:
    """What the model is told when ``response_format`` asks for a retry on ``error``, as LangChain
    answers its own parse failures (``handle_errors``); ``None`` when it does not. A format that
    is no ``ToolStrategy`` (a schema given alone, which LangChain made a ``ToolStrategy`` of, as
    the answer's artificial call shows) retries, LangChain's default."""
    handle: Any = response_format.handle_errors if isinstance(response_format, ToolStrategy) else True
    if handle is True:
        return RETRY_TEMPLATE.format(error=error)
    if handle is False:
        return None
    if isinstance(handle, str):
        return handle
    if isinstance(handle, type | tuple):
        return RETRY_TEMPLATE.format(error=error) if isinstance(error, handle) else None
    return str(handle(error))


def _schema_name(response_format: object) -> str:
    schema = getattr(getattr(response_format, "schema_spec", None), "schema", None) or getattr(
        response_format, "schema", None
    )
    return str(getattr(schema, "__name__", "response_format"))
