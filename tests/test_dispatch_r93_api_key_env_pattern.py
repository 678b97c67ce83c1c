"""Review R93: a key pasted into ``api_key_env`` is not quoted by the pattern error.

An ``api_key_env`` that is no environment variable's name was quoted whole in the inventory
error (``'sk-proj-...' must be an environment variable's name``): most keys hold a ``-``, so a
key pasted in place of the variable's name failed the pattern before ``_looks_like_a_key`` could
keep it out of the message, and the error went to the terminal, CI logs and the service log. The
value is now never quoted there, as a relative ``api_key_file`` is not; the error still says where
it is and what the field takes.
"""

from __future__ import annotations

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError

KEYS = ["sk-proj-9fA2kLmN0pQrStUvWxYz12345678", "sk-ant-api03-Zq7Vw3XkP9mR2tLs8YbN4cHd", "1KEY"]

INVENTORY = """backends:
  - name: b1
    engine: vllm
    url: http://127.0.0.1:9
    models: [m]
    api_key_env: {value}
"""


@pytest.mark.parametrize("read_keys", [True, False], ids=["reading-keys", "not-reading-keys"])
@pytest.mark.parametrize("value", KEYS)
def test_an_api_key_env_that_is_no_name_is_refused_without_quoting_it(value: str, read_keys: bool) -> None:
    with pytest.raises(InventoryError) as info:
        parse_inventory(INVENTORY.format(value=value), source="inv.yaml", read_keys=read_keys)
    message = str(info.value)
    assert message.startswith("inv.yaml:6:18: backends.0.api_key_env: "), message
    assert "must be an environment variable's name" in message and "not shown" in message, message
    assert value not in message and value[:8] not in message, message
