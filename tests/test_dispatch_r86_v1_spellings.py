"""Review R86: a backend ``url`` whose path ends in ``/v1`` is refused (every call would go to
``.../v1/v1/chat/completions``), but the check read the path as written, while the HTTP client
and ``engine_key`` resolve dot segments and decode percent-encoded unreserved characters: ``/v1/.``
and ``/%76%31`` loaded, and their calls went to ``/v1/v1/chat/completions``. Now the check reads
the path as it is sent."""

from __future__ import annotations

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError


def _backend_url(url: str) -> str:
    return parse_inventory(f"backends: [{{name: b, url: '{url}', models: [m]}}]").backends[0].url


@pytest.mark.parametrize(
    "path",
    ["/v1/.", "/v1/./", "/%76%31", "/%56%31/", "/v1/%2E", "/x/../v1", "/api/v1/x/.."],
)
def test_a_url_whose_path_resolves_to_v1_is_refused(path: str) -> None:
    with pytest.raises(InventoryError, match="the URL ends in /v1"):
        _backend_url(f"http://127.0.0.1:8000{path}")


@pytest.mark.parametrize("path", ["", "/", "/v1/..", "/v1/x", "/%76%32", "/v%2F1"])
def test_a_url_whose_path_does_not_resolve_to_v1_loads(path: str) -> None:
    assert _backend_url(f"http://127.0.0.1:8000{path}") == f"http://127.0.0.1:8000{path}"
