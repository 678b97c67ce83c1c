"""Review R84 (regression): ``Dispatcher.chat`` and ``stream`` now raise ``FieldError`` for the
engine fields the gateway refuses, but the class lived in the private ``dispatch/_engine_fields.py``
and was exported only from ``agentgate.dispatch.gateway``, which imports Starlette: a caller of
the dispatcher alone could catch it only through a private module or the web framework. It is now
a public name of ``agentgate.dispatch``, loaded without Starlette."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import agentgate.dispatch
from agentgate.dispatch import Dispatcher, FieldError, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


def test_field_error_is_a_public_name_of_dispatch() -> None:
    assert "FieldError" in agentgate.dispatch.__all__ and "FieldError" in dir(agentgate.dispatch)
    assert issubclass(FieldError, InputError)


def test_it_is_the_gateways_class_and_what_the_dispatcher_raises() -> None:
    from agentgate.dispatch.gateway import FieldError as gateway_field_error

    assert gateway_field_error is FieldError
    payload = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}

    async def call() -> None:
        async with Dispatcher(INVENTORY, Router(INVENTORY), max_attempts=1, recovery_wait_s=0) as dispatcher:
            await dispatcher.chat(payload)

    with pytest.raises(FieldError) as raised:
        asyncio.run(call())
    assert raised.value.param == "n"


def test_importing_it_loads_no_web_framework() -> None:
    code = (
        "import sys; from agentgate.dispatch import FieldError;"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
