"""Review R87b: ``SimServer`` took a ``model_name`` holding a lone surrogate (``"m\\ud800"``), which
no UTF-8 encoder writes: every ``/v1/models`` and ``/metrics`` request, which send the name, was then
a 500 with a ``UnicodeEncodeError`` traceback. It is now refused as it is made (``InputError``
naming the argument, the character and where it stands); other non-ASCII text is served as given."""

from __future__ import annotations

import json
import urllib.request

import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (
            "m\ud800",
            "not 'm\\ud800': it holds lone surrogate (half of a UTF-16 pair, not Unicode text) U+D800 at character 2",
        ),
        ("\udcff", "not '\\udcff': it holds a byte that is not UTF-8 (0xff) at character 1"),
    ],
)
def test_a_model_name_utf8_cannot_encode_is_refused(name: str, said: str) -> None:
    with pytest.raises(InputError) as refused:
        SimServer(model_name=name)
    assert str(refused.value) == f"model_name must be text UTF-8 can encode (the served model's id), {said}"


def test_a_non_ascii_model_name_is_served_as_given() -> None:
    with SimServer(model_name="modèle-é", time_scale=1e-3) as server:
        with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as answer:
            assert json.load(answer)["data"][0]["id"] == "modèle-é"
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as answer:
            assert 'model_name="modèle-é"' in answer.read().decode()
