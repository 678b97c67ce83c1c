"""Lead, session 18: times in finding messages are UTC, also at the ends of the calendar."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentgate._time import utc_text, when
from agentgate.authority._grant import issue, time_finding
from agentgate.keys import SigningKey


def test_a_time_a_person_reads_is_utc_and_a_time_no_calendar_holds_is_kept_as_given() -> None:
    assert utc_text(1796169600) == when(1796169600) == "2026-12-02T00:00:00Z"
    assert utc_text(2**62) is None
    assert when(2**62) == f"{2**62} (Unix seconds)"
    assert when(-(2**62)) == f"{-(2**62)} (Unix seconds)"


@pytest.mark.parametrize("now_offset", [10_000, -10_000])
def test_an_expired_or_early_grant_is_reported_in_utc(now_offset: int) -> None:
    root = SigningKey.generate()
    chain = issue(root, audience=SigningKey.generate().public.did, capabilities=["tool:x"], ttl=3600)
    now = int(time.time()) + now_offset
    finding = time_finding(chain, now)
    assert finding is not None and finding.code in {"grant_expired", "grant_not_yet_valid"}
    assert when(now) in finding.message and str(now) not in finding.message


def test_gate_open_takes_the_store_as_a_path_too(tmp_path: Path) -> None:
    from agentgate.errors import InputError
    from agentgate.gate import Gate

    policy = Path(__file__).resolve().parents[1] / "policies" / "support.yaml"
    gate = Gate.open(policy, store=tmp_path / "gate.db")
    gate.close()
    assert (tmp_path / "gate.db").is_file()
    with pytest.raises(InputError, match="store"):
        Gate.open(policy, store=b"gate.db")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("resource", "hint"),
    [
        ("model:other", "make the gate's resource name a model declared under models:"),
        ("tool:other", "make the gate's resource name a tool declared under tools:"),
    ],
)
def test_a_gate_on_an_undeclared_resource_is_told_what_to_name(resource: str, hint: str) -> None:
    """R47 (docs helper): the lint hint said "name an argument the guarded tool declares" for a
    gate on an undeclared model too."""
    from agentgate.policy import lint, parse_policy

    policy = parse_policy(
        f"""
version: 1
trust_anchors: {{root: {{did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}}}
principals:
  bot: {{kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}}
  lead: {{kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}}
models:
  qwen3-32b: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    capabilities: [{{resource: "model:qwen3-32b", constraints: {{max_tokens: {{le: 4096}}}}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: {resource}
    when: {{max_tokens: {{gt: 100}}}}
    approvers: [lead]
""",
        source="gated.yaml",
    )
    found = [f for f in lint(policy) if f.code == "gate_on_undeclared_argument"]
    assert [f.hint for f in found] == [hint]


def test_an_argument_byte_that_is_not_utf8_is_named_as_a_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R47 (docs helper): ``--purpose`` with a byte that is not UTF-8 was refused as a "control
    character '\\udcff'"; a real control character is still named as one."""
    import os

    from agentgate.cli.main import main

    keys = str(tmp_path / "k")
    assert main(["keys", "new", "a", "--dir", keys]) == 0
    base = ["grant", "issue", "--issuer", f"{keys}/a.key", "--to", f"{keys}/a.pub", "--allow", "tool:x"]
    capsys.readouterr()
    assert main([*base, "--ttl", "1h", "--purpose", os.fsdecode(b"ab\xffc")]) == 2
    assert "--purpose holds a byte that is not UTF-8 (0xff)" in capsys.readouterr().err
    assert main([*base, "--ttl", "1h", "--purpose", "ab\x1bc"]) == 2
    assert "--purpose holds control character '\\x1b'" in capsys.readouterr().err
    assert main(["keys", "new", os.fsdecode(b"a\xffb"), "--dir", keys]) == 2
    assert "a byte that is not UTF-8 (0xff)" in capsys.readouterr().err


@pytest.mark.parametrize("tagged", ["!!timestamp 2026-01-31", "&d !!timestamp 2026-01-31"])
def test_a_timestamp_tag_is_refused_as_every_tag_outside_the_core_schema(tagged: str) -> None:
    """R47 (policy helper): an explicit, unquoted ``!!timestamp`` was read as text, where
    docs/policy-reference.md refuses every tag outside the core schema; a plain date stays text."""
    from agentgate._yaml import load_yaml
    from agentgate.errors import PolicyError

    assert load_yaml("a: 2026-01-31\n", source="t.yaml")[0] == {"a": "2026-01-31"}
    with pytest.raises(PolicyError, match=r"t.yaml:1:4: tag 'tag:yaml.org,2002:timestamp' is not allowed"):
        load_yaml(f"a: {tagged}\n", source="t.yaml")


def test_a_role_inheriting_an_undeclared_role_is_refused_at_its_line() -> None:
    """R47 (policy helper's l13, untested): the check that ``inherits`` names a declared role,
    removed, survived the suite: the typo would silently inherit nothing."""
    from agentgate.errors import PolicyError
    from agentgate.policy import parse_policy

    text = """version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
roles:
  base: {capabilities: [{resource: "tool:search"}], ttl_s: 600}
  chat:
    inherits: [bsae]
    capabilities: [{resource: "tool:x"}]
    ttl_s: 600
"""
    with pytest.raises(PolicyError) as raised:
        parse_policy(text, source="p.yaml")
    assert raised.value.line == 8 and "bsae" in str(raised.value)
