"""Backend URLs in an inventory (agentgate/dispatch/inventory.py ``inventory_from_mapping``): one
ending in a bare ``?`` or ``#`` is refused; IPv6 literals (a zone id too) and percent-escaped
``?`` and ``#`` are accepted, the chat URL built behind them.
"""

from __future__ import annotations

import pytest
from test_dispatch_request_ids import MODEL

from agentgate.dispatch import inventory_from_mapping
from agentgate.errors import InventoryError


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/?", "http://127.0.0.1:8000/v1#"])
def test_a_url_ending_in_a_bare_question_mark_or_hash_is_refused(url: str) -> None:
    with pytest.raises(InventoryError):
        inventory = inventory_from_mapping({"backends": [{"name": "a", "url": url, "models": [MODEL]}]})
        pytest.fail(f"accepted; chat URL {inventory.backends[0].chat_url}")


@pytest.mark.parametrize(
    "url",
    ["http://[::1]:8000", "http://[fe80::1%25eth0]:8000", "http://127.0.0.1:8000/a%3Fb%23c"],
    ids=["ipv6", "ipv6-zone", "escaped"],
)
def test_ipv6_literals_and_escaped_question_marks_and_hashes_are_accepted(url: str) -> None:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "a", "url": url, "metrics_url": url + "/metrics", "models": [MODEL]}]}
    )
    assert inventory.backends[0].chat_url.startswith(url + "/")
