"""Loading policies: every error located and explained, examples valid, deny-all without a policy."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.keys import SigningKey, save_key
from agentgate.policy import Outcome, Policy, PolicyIndex, json_schema_text, lint, load_policy, parse_policy

POLICIES = Path(__file__).resolve().parents[1] / "policies"
EXAMPLES = ["support.yaml", "research_team.yaml", "gpu_platform.yaml"]
DID = SigningKey(b"\x01" * 32).did


def _error(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    return info.value


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_load_and_reference_the_schema(name: str) -> None:
    policy = load_policy(POLICIES / name)
    assert policy.document.version == 1 and policy.digest
    first = (POLICIES / name).read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=./policy.schema.json"


def test_schema_file_is_in_sync_with_the_models() -> None:
    assert (POLICIES / "policy.schema.json").read_text() == json_schema_text()
    schema = json.loads(json_schema_text())
    assert schema["additionalProperties"] is False and schema["required"] == ["version"]
    role = schema["$defs"]["Role"]["properties"]
    assert {"capabilities", "budget", "ttl_s", "delegation", "inherits"} <= set(role)
    assert role["ttl_s"]["description"]


def test_deny_all_denies_everything() -> None:
    index = PolicyIndex(Policy.deny_all())
    decision = index.evaluate(DID, Call.tool("tickets.read", {}))
    assert decision.outcome is Outcome.DENY and decision.reasons


def test_empty_file_is_an_error_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("\n# nothing\n")
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "p.yaml")
    assert "empty" in info.value.message and "deny everything" in (info.value.hint or "")


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "absent.yaml")
    assert info.value.file == str(tmp_path / "absent.yaml")


def test_unknown_field_points_at_the_key_and_suggests_the_name() -> None:
    error = _error("version: 1\nroles:\n  a:\n    capabilities: []\n    tll_s: 60\n")
    assert (error.line, error.column) == (5, 5)
    assert "roles.a.tll_s" in error.message and "'ttl_s'" in (error.hint or "")


def test_wrong_type_points_at_the_value() -> None:
    error = _error("version: 1\nsettings:\n  max_ttl_s: 'long'\n")
    assert (error.line, error.column) == (3, 14) and error.expected == "an integer"


def test_strings_are_not_coerced_into_booleans_or_numbers() -> None:
    assert _error("version: 1\nsettings:\n  revocation: 'false'\n").line == 3
    assert _error("version: 1\ntools:\n  t:\n    audit: 0\n").line == 4


def test_missing_required_field_names_it() -> None:
    error = _error("version: 1\nprincipals:\n  bot: {did: " + DID + "}\n")
    assert "principals.bot.kind is required" in error.message and error.line == 3


def test_unknown_reference_suggests_the_close_name() -> None:
    error = _error(
        f"version: 1\nprincipals:\n  bot: {{kind: agent, did: {DID}, roles: [suport]}}\nroles:\n  support: {{}}\n"
    )
    assert "'suport' is not declared in roles" in error.message and "'support'" in (error.hint or "")


def test_bad_constraint_operator_value_is_located() -> None:
    error = _error(
        "version: 1\nroles:\n  a:\n    capabilities:\n      - resource: tool:x\n        constraints: {n: {in: []}}\n"
    )
    assert error.line == 6 and "in" in error.message


def test_key_files_resolve_against_the_policy_or_key_dir(tmp_path: Path) -> None:
    key = SigningKey.generate()
    save_key(key, tmp_path / "keys", "bot")
    text = "version: 1\nprincipals:\n  bot: {kind: agent, key: keys/bot.pub}\n"
    (tmp_path / "p.yaml").write_text(text)
    assert load_policy(tmp_path / "p.yaml").principal_dids["bot"] == key.did
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "p.yaml", elsewhere / "p.yaml")
    with pytest.raises(PolicyError) as info:
        load_policy(elsewhere / "p.yaml")
    assert "does not exist" in info.value.message and info.value.line == 3
    assert load_policy(elsewhere / "p.yaml", key_dir=tmp_path).principal_dids["bot"] == key.did


def test_key_file_and_did_must_agree(tmp_path: Path) -> None:
    save_key(SigningKey.generate(), tmp_path, "bot")
    text = f"version: 1\nprincipals:\n  bot: {{kind: agent, key: bot.pub, did: {DID}}}\n"
    with pytest.raises(PolicyError, match="different keys"):
        parse_policy(text, source="p.yaml", base_dir=tmp_path)


def test_private_key_file_is_not_a_public_key(tmp_path: Path) -> None:
    save_key(SigningKey.generate(), tmp_path, "bot")
    text = "version: 1\nprincipals:\n  bot: {kind: agent, key: bot.key}\n"
    with pytest.raises(PolicyError, match=r"bot\.key"):
        parse_policy(text, source="p.yaml", base_dir=tmp_path)


def test_non_utf8_and_non_mapping_documents_are_refused() -> None:
    with pytest.raises(PolicyError, match="UTF-8"):
        parse_policy(b"version: 1\nname: \xff\n", source="p.yaml")
    assert "not a mapping" in _error("- version: 1\n").message


def test_policy_digest_is_the_file_hash(tmp_path: Path) -> None:
    import hashlib

    text = "version: 1\n"
    (tmp_path / "p.yaml").write_text(text)
    assert load_policy(tmp_path / "p.yaml").digest == hashlib.sha256(text.encode()).hexdigest()


_KEYS = st.sampled_from(
    [
        "version",
        "roles",
        "tools",
        "principals",
        "capabilities",
        "resource",
        "ttl_s",
        "args",
        "type",
        "kind",
        "le",
        "x",
    ]
)
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=8), st.just("tool:a.b"))
_TREES = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(tree=_TREES)
def test_any_structure_loads_or_raises_policy_error(tree: object) -> None:
    text = yaml.safe_dump({"version": 1, "roles": tree}) if isinstance(tree, dict) else yaml.safe_dump(tree)
    try:
        policy = parse_policy(text, source="fuzz.yaml")
    except PolicyError as exc:
        assert exc.file == "fuzz.yaml" and exc.message
    else:
        lint(policy)


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("version: 1\n-[]{}&*!'\"#:ab,? \t|>")), max_size=60))
def test_any_text_loads_or_raises_policy_error(text: str) -> None:
    try:
        parse_policy(text, source="fuzz.yaml")
    except PolicyError as exc:
        assert exc.file == "fuzz.yaml"
