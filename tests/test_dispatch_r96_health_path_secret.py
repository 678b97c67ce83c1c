"""Review R96: an inventory's ``health_path`` holding a query string or fragment (a hosted
endpoint's key written as ``/v1beta/models?key=...``, as Gemini's takes one) was refused with the
value quoted whole, key included, on the terminal and in logs. It is now refused as ``url`` and
``metrics_url`` are: the message names the fault and how to give the key, and never the value."""

from __future__ import annotations

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models?key=AIzaSyD-SECRET0123456789abcdef",
        "/v1/models#sk-live-SECRET",
        "/v1/models?",
        "/v 1/models?key=SECRET",  # another fault besides: the query is still what is said
    ],
)
def test_a_health_path_with_a_query_is_refused_without_its_value(path: str) -> None:
    text = f'backends:\n  - {{name: b, url: "http://h:1", models: [m], health_path: "{path}"}}\n'
    with pytest.raises(
        InventoryError,
        match=r"^<inventory>:2:\d+: backends\.0\.health_path: the path has a query string or fragment "
        r".*api_key_env or api_key_file",
    ) as info:
        parse_inventory(text)
    assert "models" not in str(info.value)
    assert "SECRET" not in str(info.value)


def test_a_health_path_without_a_query_is_still_quoted() -> None:
    text = 'backends:\n  - {name: b, url: "http://h:1", models: [m], health_path: "/v 1"}\n'
    with pytest.raises(InventoryError, match=r"'/v 1' must be a path starting with /"):
        parse_inventory(text)
