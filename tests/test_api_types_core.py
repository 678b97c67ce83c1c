"""Wrong Python types at the core modules' public entry points (keys, capabilities,
policy loading and index, the authority functions, the schedulers): what the fixes made for
``tests/test_api_misuse.py`` hold beyond that file's cases, and what they leave as it was.

What holds (all fixed in this review, each a plain test):

- A wrong type is a typed error that names the parameter or the expected type, never the
  misuse read another way: one string where a list of capabilities goes is called that, not
  capability ``'t'``; ``Invocation.sign``/``delegate`` with a ``PublicKey`` say that a public key
  cannot sign; a ``now`` that is NaN, infinite, a boolean or a string is an ``InputError`` in
  ``issue``, ``verify_chain``, ``decide``, ``revoke`` and ``Invocation.sign``.
- A misuse of ``Authority.decide`` writes nothing: no nonce, no revocation (real SQLite file).
- Valid input keeps working: a path given as bytes to ``load_policy``/``load_signing_key``
  (``load_policy`` of an existing file named by bytes used to end in pathlib's ``TypeError``),
  a policy as ``bytearray``, a ``Fraction`` for ``now``, constraints as a list of pairs, a
  ``MappingProxyType`` for a ``ToolCall``'s arguments, trust anchors given as a list holding a
  ``SigningKey`` (taken as its public key, as before), an unknown principal that is not even
  hashable (a deny, not a ``TypeError``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from agentgate.authority import (
    Authority,
    GrantRepository,
    Invocation,
    delegate,
    issue,
    revoke,
    verify_chain,
)
from agentgate.capabilities import Call, Capability, Constraint, covers
from agentgate.errors import CapabilityError, InputError, KeyFileError, PolicyError, TokenFormatError
from agentgate.keys import PublicKey, SigningKey, load_public_key, load_signing_key, save_key
from agentgate.policy import PolicyIndex, load_policy, parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall

ROOT, AGENT, OTHER = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
POLICY = f"""
version: 1
principals:
  agent: {{kind: agent, did: "{AGENT.did}", roles: [worker]}}
tools:
  lookup: {{args: {{id: {{type: string}}}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}]
    ttl_s: 60
"""


# --- messages name what was wrong ------------------------------------------------------------------


def test_one_string_for_a_list_of_capabilities_is_named_as_such() -> None:
    for make in (
        lambda: issue(ROOT, AGENT.public, "tool:x", ttl=60),  # type: ignore[arg-type]
        lambda: issue(ROOT, AGENT.public, None, ttl=60),  # type: ignore[arg-type]
        lambda: delegate(issue(ROOT, AGENT.public, ["tool:x"], ttl=60), AGENT, OTHER.did, "tool:x", ttl=30),  # type: ignore[arg-type]
    ):
        with pytest.raises(CapabilityError, match="capabilities are a list"):
            make()


@pytest.mark.parametrize("signer", ["issue", "delegate", "sign"])
def test_a_public_key_where_a_signing_key_goes_says_it_cannot_sign(signer: str) -> None:
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=60)
    calls = {
        "issue": lambda: issue(ROOT.public, AGENT.public, ["tool:x"], ttl=60),  # type: ignore[arg-type]
        "delegate": lambda: delegate(chain, AGENT.public, OTHER.did, ["tool:x"], ttl=30),  # type: ignore[arg-type]
        "sign": lambda: Invocation.sign(AGENT.public, chain, Call.tool("x")),  # type: ignore[arg-type]
    }
    with pytest.raises(InputError, match="a public key cannot sign"):
        calls[signer]()


@pytest.mark.parametrize("now", [math.nan, math.inf, -math.inf, True, "1700000000", [1]])
def test_a_now_that_is_not_a_finite_number_is_an_input_error_everywhere(tmp_path: Path, now: Any) -> None:
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=60)
    with SQLiteStore(tmp_path / "a.db") as store:
        repo = GrantRepository(store)
        engine = Authority(repo, [ROOT.public])
        uses = [
            lambda: issue(ROOT, AGENT.public, ["tool:x"], ttl=60, now=now),
            lambda: verify_chain(chain, ROOT.public, now=now),
            lambda: Invocation.sign(AGENT, chain, Call.tool("x"), now=now),
            lambda: engine.decide(Invocation.sign(AGENT, chain, Call.tool("x")), now=now),
            lambda: engine.decide_held(AGENT, chain, Call.tool("x"), now=now),
            lambda: revoke(repo, chain, now=now),
        ]
        for use in uses:
            with pytest.raises(InputError, match="finite number"):
                use()
        assert store.query("SELECT count(*) FROM agentgate_nonces")[0][0] == 0
        assert store.query("SELECT count(*) FROM agentgate_revocations")[0][0] == 0


def test_decide_with_a_hand_built_invocation_of_a_dict_writes_nothing(tmp_path: Path) -> None:
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=60)
    signed = Invocation.sign(AGENT, chain, Call.tool("x"))
    forged = dataclasses.replace(signed, call={"resource": "tool:x"})
    with SQLiteStore(tmp_path / "a.db") as store:
        engine = Authority(GrantRepository(store), [ROOT.public])
        with pytest.raises(InputError, match="call is a Call"):
            engine.decide(forged)
        assert engine.decide(signed).allowed  # the real one, once: its nonce is the only row
        assert store.query("SELECT count(*) FROM agentgate_nonces")[0][0] == 1


def test_key_operations_name_bytes() -> None:
    key = SigningKey.generate()
    signature = key.sign(b"m")
    with pytest.raises(KeyFileError, match="32 bytes, got NoneType"):
        PublicKey(None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="must be bytes, got bytearray"):
        key.public.verify(b"m", bytearray(signature))  # type: ignore[arg-type]
    with pytest.raises(InputError, match="must be bytes, got NoneType"):
        key.sign(None)  # type: ignore[arg-type]
    key.public.verify(b"m", signature)  # the valid call still verifies
    assert not key.public.is_valid(b"n", signature)


# --- valid input that keeps working ---------------------------------------------------------------


def test_paths_given_as_bytes_still_load(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    assert load_policy(os.fsencode(policy_file)).principal_roles("agent") == ("worker",)
    key_path, pub_path = save_key(AGENT, tmp_path / "keys", "agent")
    assert load_signing_key(os.fsencode(key_path)).did == AGENT.did
    assert load_public_key(os.fsencode(pub_path)).did == AGENT.did
    assert load_public_key(pub_path).did == load_public_key(AGENT.did).did == AGENT.did
    with pytest.raises(PolicyError, match="expected a file path"):
        load_policy(policy_file, key_dir=5)  # type: ignore[arg-type]


def test_a_policy_as_bytearray_still_parses_and_its_source_must_be_text() -> None:
    assert parse_policy(bytearray(POLICY.encode())).principal_roles("agent") == ("worker",)
    with pytest.raises(PolicyError, match="source name"):
        parse_policy(POLICY, source=None)  # type: ignore[arg-type]


def test_an_unhashable_principal_is_a_deny() -> None:
    index = PolicyIndex(parse_policy(POLICY))
    assert not index.evaluate(["agent"], Call.tool("lookup", {"id": "1"})).allowed  # type: ignore[arg-type]
    assert index.evaluate("agent", Call.tool("lookup", {"id": "1"})).allowed


def test_capabilities_built_every_valid_way_still_work() -> None:
    pairs = [("amount", Constraint.of({"le": 5}))]
    listed = Capability("tool:x", "invoke", pairs)  # type: ignore[arg-type]
    assert (
        listed == Capability.of("tool:x", None, {"amount": {"le": 5}}) == Capability.parse("tool:x?amount<=5")
    )
    assert Capability.of("tool:x", constraints=MappingProxyType({"amount": {"le": 5}})) == listed
    assert covers(listed, Call.tool("x", {"amount": 5}))
    assert not covers(listed, Call.tool("x", {"amount": 6}))
    with pytest.raises(CapabilityError, match="a Capability and a Call"):
        covers(listed, {"resource": "tool:x"})  # type: ignore[arg-type]


def test_authority_values_that_were_valid_stay_valid(tmp_path: Path) -> None:
    chain = issue(ROOT, AGENT.public, ["tool:x"], ttl=60, now=Fraction(3_000_000_001, 2))
    assert chain.tip.not_before == 1_500_000_000
    fresh = issue(ROOT, AGENT.public, ["tool:x"], ttl=60)
    assert verify_chain(fresh, [OTHER.public, ROOT]) == fresh  # type: ignore[list-item]
    with pytest.raises(TokenFormatError, match="private key"):
        verify_chain(fresh, ROOT)  # type: ignore[arg-type]
    with pytest.raises(TokenFormatError, match="audience"):
        issue(ROOT, [AGENT.did], ["tool:x"], ttl=60)  # type: ignore[arg-type]


def test_tool_call_arguments_any_mapping_and_the_schedulers_take_a_subclass() -> None:
    class Tagged(ToolCall):
        pass

    proxied = ToolCall("t", arguments=MappingProxyType({"a": 1}))
    assert proxied.digest() == ToolCall("t", arguments={"a": 1}).digest()
    with SyncScheduler(SchedulerConfig()) as scheduler:
        assert scheduler.submit(Tagged("t"), lambda attempt: attempt.number) == 1
        with pytest.raises(InputError, match="ToolCall"):
            scheduler.submit({"tool": "t"}, lambda _: 1)  # type: ignore[arg-type]

    async def main() -> int:
        core = Scheduler(SchedulerConfig())
        try:

            async def run(attempt: Any) -> int:
                return int(attempt.number)

            return await core.submit(Tagged("t"), run)
        finally:
            await core.aclose()

    assert asyncio.run(main()) == 1
