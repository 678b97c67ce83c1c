"""Review R82: three refusals that were right but said the wrong thing.

- ``agentgate keys new a.key.key`` offered ``agentgate keys new a.key``, refused in turn: the
  command offered now strips every ``.key``/``.pub``.
- A grant whose ``crit`` is ``[]`` or ``[""]`` was refused as ``unknown critical extension(s): ``,
  naming nothing: it now shows the field as written.
- ``--args`` holding JSON nested deeper than Python's decoder goes was "not JSON" with a quoting
  hint; it is JSON, nested too deep, and is said so, as a shallower one already was."""

from __future__ import annotations

import json

import pytest
from test_authority_grants import ROOT, root_body

from agentgate._json import MAX_DEPTH
from agentgate.authority._encoding import canonical_json
from agentgate.authority._grant import GRANT_CONTEXT
from agentgate.authority._parsing import parse_grant
from agentgate.cli._common import json_object
from agentgate.cli.main import main
from agentgate.errors import InputError, TokenFormatError


@pytest.mark.parametrize(("name", "offered"), [("a.key.key", "a"), ("a.pub.key", "a"), ("b.pub.pub", "b")])
def test_keys_new_offers_a_name_it_takes(
    tmp_path: object, capsys: pytest.CaptureFixture[str], name: str, offered: str
) -> None:
    assert main(["keys", "new", name, "--dir", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"agentgate keys new {offered} writes {offered}.key and {offered}.pub" in said, said
    assert main(["keys", "new", offered, "--dir", str(tmp_path)]) == 0  # the command offered works


@pytest.mark.parametrize(("crit", "shown"), [([], "[]"), ([""], "['']")])
def test_an_empty_crit_is_shown_as_written(crit: list[str], shown: str) -> None:
    body = root_body()
    body["crit"] = crit
    payload = canonical_json(body)
    with pytest.raises(TokenFormatError) as refused:
        parse_grant(payload, ROOT.sign(GRANT_CONTEXT + payload))
    assert str(refused.value).endswith(f"unknown critical extension(s): {shown}"), refused.value


@pytest.mark.parametrize("depth", [1200, 3000])
def test_args_nested_too_deep_are_said_to_be_whatever_the_depth(depth: int) -> None:
    text = json.dumps({"a": 0}).replace("0", "[" * depth + "]" * depth)
    with pytest.raises(InputError) as refused:
        json_object(text)
    said = str(refused.value)
    assert f"nested more than {MAX_DEPTH} levels deep" in said and "not JSON" not in said, said
