"""Review round 48, mutation testing of the policy linter, the strict YAML loader and the key
files: each test kills a hand-made mutant that the suite let live (named in its docstring), and
pins the rule that mutant broke: a did:key that decodes only to its own key, a key file read
only when it is a private regular file, YAML read as YAML 1.2 and never as what it is not, and a
linter that speaks up on each dangerous policy it was written to find.
"""

from __future__ import annotations

import os
from pathlib import Path

import base58
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import x25519

from agentgate._yaml import load_yaml, read_source
from agentgate.errors import InputError, KeyFileError, PolicyError
from agentgate.findings import Finding
from agentgate.keys import (
    MAX_KEY_FILE_BYTES,
    Keyring,
    PublicKey,
    SigningKey,
    load_public_key,
    load_signing_key,
    public_key_from_did,
    read_regular_file,
    save_key,
)
from agentgate.policy import lint, parse_policy

SEED = bytes(range(32))
KEY = SigningKey(SEED)

# --- keys: did:key decoding ---------------------------------------------------------------------


def test_a_did_key_with_another_multicodec_second_byte_is_refused() -> None:
    """Mutant: the multicodec check compared only its first byte (0xed), so 0xed 0x00 passed.

    Rule: a did:key decodes to an Ed25519 key only under the exact prefix 0xed 0x01; any other
    codec (or a corrupted one) names no Ed25519 key and is refused, never read as one."""
    for prefix in (b"\xed\x00", b"\xed\x02", b"\xed\x81"):
        did = "did:key:z" + base58.b58encode(prefix + KEY.public.raw).decode()
        with pytest.raises(KeyFileError, match="does not hold an Ed25519 public key"):
            public_key_from_did(did)
        with pytest.raises(KeyFileError):
            Keyring([KEY.public]).get(did)


def test_a_did_key_with_trailing_blanks_is_not_another_spelling_of_the_key() -> None:
    """Mutant: the canonical-form check (re-encode and compare) was dropped; base58 strips
    trailing whitespace, so ``did + " "`` decoded to the same key.

    Rule: one key has one did:key; a principal id with trailing blanks is another string (a
    different id in a policy, a keyring or an audit record) and is refused, not mapped to the key."""
    did = KEY.did
    assert public_key_from_did(did) == KEY.public.raw
    for spelled in (did + " ", did + "\n", did + "\t"):
        with pytest.raises(KeyFileError, match="canonical"):
            public_key_from_did(spelled)
        with pytest.raises(KeyFileError):
            PublicKey.from_did(spelled)


# --- keys: what a key file is -------------------------------------------------------------------


def test_a_signing_key_seed_longer_than_32_bytes_is_a_typed_error() -> None:
    """Mutant: the seed length check refused only short seeds (``< 32``); a 33-byte seed reached
    PyNaCl, whose bare ValueError escaped as a traceback.

    Rule: a seed of any length but 32 is a KeyFileError naming the length."""
    for size in (33, 64):
        with pytest.raises(KeyFileError, match=f"got {size} bytes"):
            SigningKey(b"\x01" * size)


def test_a_fifo_given_as_a_key_file_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    """Mutant: the regular-file check was dropped; a FIFO was opened and read (empty without a
    writer) and reported as a malformed key, a device read as data.

    Rule: only a regular file is read as a key or a policy; a FIFO is refused at once as what it is."""
    fifo = tmp_path / "agent.key"
    os.mkfifo(fifo)
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_signing_key(fifo)
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_public_key(fifo)
    with pytest.raises(PolicyError, match="not a regular file"):
        read_source(fifo, PolicyError, limit=1 << 20, what="a policy")


def test_a_file_whose_size_the_kernel_does_not_report_is_still_bounded() -> None:
    """Mutant: the check after reading compared with ``limit + 1``; a file whose ``st_size`` is 0
    (/proc) but holds more than the limit passed with ``limit + 1`` bytes read.

    Rule: no more than ``limit`` bytes are ever accepted, whatever fstat says."""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists() or os.stat(smaps).st_size != 0:
        pytest.skip("needs a /proc file of unreported size")
    with pytest.raises(InputError, match=f"larger than {MAX_KEY_FILE_BYTES} bytes"):
        read_regular_file(smaps, MAX_KEY_FILE_BYTES, "private key")
    data, _ = read_regular_file(smaps, 1 << 24, "private key")  # the same file, under a wide limit
    assert len(data) > MAX_KEY_FILE_BYTES + 1


def test_a_group_readable_or_writable_private_key_is_refused(tmp_path: Path) -> None:
    """Mutant: the permission check looked at the bits of others only, so a group-readable
    (0640) or group-writable (0620) key was used.

    Rule: a private key file is accepted only when neither group nor others may touch it."""
    key_path, _ = save_key(KEY, tmp_path, "agent")
    assert load_signing_key(key_path).did == KEY.did
    for mode in (0o640, 0o620, 0o610, 0o604):
        key_path.chmod(mode)
        with pytest.raises(KeyFileError, match=f"accessible by others \\(mode {mode:04o}\\)"):
            load_signing_key(key_path)


def test_an_x25519_pem_is_not_read_as_an_ed25519_public_key(tmp_path: Path) -> None:
    """Mutant: the algorithm check of a PEM public key was dropped; an X25519 key (32 raw bytes,
    like Ed25519) became a verification key.

    Rule: only an Ed25519 PEM public key is loaded; another algorithm is refused by name."""
    pem = (
        x25519.X25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    path = tmp_path / "peer.pub"
    path.write_bytes(pem)
    with pytest.raises(KeyFileError, match="not an Ed25519 public key"):
        load_public_key(path)


def test_a_hidden_key_name_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Mutant: the leading-dot test of the key name was dropped, so ``.agent`` wrote the hidden
    ``.agent.key``/``.agent.pub`` (and a name like the temporary files' could be taken for one).

    Rule: a key name is a plain, visible file name; a refused name writes nothing."""
    for name in (".agent", ".agentgate-keypair-x", ".."):
        with pytest.raises(KeyFileError, match="invalid key name"):
            save_key(KEY, tmp_path, name)
    assert list(tmp_path.iterdir()) == []


def _temporary_link(directory: Path, target: Path, tag: str) -> Path:
    """What a ``save_key`` killed outright leaves: a temporary file of its own (by name)."""
    temporary = directory / f".agentgate-keypair-{tag}.tmp"
    if target.exists():
        os.link(target, temporary)
    else:
        temporary.write_bytes(b"")
    return temporary


def test_clean_up_keeps_a_whole_pair_whose_key_is_still_linked_to_a_temporary(tmp_path: Path) -> None:
    """Mutant: the clean-up of interrupted pairs no longer asked whether ``NAME.pub`` exists, so
    a pair committed by a run killed just before it removed its temporary file lost its key.

    Rule: a ``NAME.key`` with its ``NAME.pub`` is a committed pair (its did:key may be published)
    and no later ``save_key`` removes it; only the temporary file goes."""
    key_path, pub_path = save_key(KEY, tmp_path, "agent")
    temporary = _temporary_link(tmp_path, key_path, "killed")
    save_key(SigningKey(b"\x02" * 32), tmp_path, "other")
    assert load_signing_key(key_path).did == KEY.did
    assert pub_path.read_text().strip() == KEY.did
    assert not temporary.exists()


def test_clean_up_keeps_a_key_whose_pub_was_moved_away_when_it_is_not_a_temporary(
    tmp_path: Path,
) -> None:
    """Mutant: the clean-up removed every ``NAME.key`` without ``NAME.pub`` as soon as any
    temporary file was there, not only one still linked to such a temporary file.

    Rule: a key the user kept after moving its ``.pub`` away to publish it is never removed by a
    later ``save_key``, even one that finds another run's leftovers in the directory."""
    key_path, pub_path = save_key(KEY, tmp_path, "agent")
    pub_path.rename(tmp_path.parent / f"{tmp_path.name}-published.pub")
    temporary = _temporary_link(tmp_path, tmp_path / "absent", "leftover")
    save_key(SigningKey(b"\x02" * 32), tmp_path, "other")
    assert load_signing_key(key_path).did == KEY.did
    assert not temporary.exists()


def test_replace_file_gives_the_file_the_mode_asked_for(tmp_path: Path) -> None:
    """Mutant: ``replace_file`` no longer set the mode, so every file it wrote kept the 0600 of
    its temporary file (a policy written by ``policy fmt -o`` unreadable to the service).

    Rule: the replaced file has exactly the mode asked, whatever the old file's mode was."""
    from agentgate.keys import replace_file

    path = tmp_path / "policy.yaml"
    path.write_text("old")
    path.chmod(0o666)
    replace_file(path, b"new", 0o644)
    assert path.read_bytes() == b"new" and (path.stat().st_mode & 0o777) == 0o644
    replace_file(path, b"newer", 0o600)
    assert path.read_bytes() == b"newer" and (path.stat().st_mode & 0o777) == 0o600


# --- YAML: bounds ---------------------------------------------------------------------------------


def test_the_alias_limit_is_exact() -> None:
    """Mutant: the alias count was compared with ``MAX_ALIASES + 1``, letting one more through.

    Rule: at most ``MAX_ALIASES`` (16) aliases of a collection load; the next is refused."""
    from agentgate._yaml import MAX_ALIASES

    def doc(n: int) -> str:
        return "a: &x [1, 2]\nb: [" + ", ".join(["*x"] * n) + "]\n"

    data, _ = load_yaml(doc(MAX_ALIASES), source="p.yaml")
    assert data["b"] == [[1, 2]] * MAX_ALIASES
    with pytest.raises(PolicyError, match=f"more than {MAX_ALIASES} YAML aliases"):
        load_yaml(doc(MAX_ALIASES + 1), source="p.yaml")


def test_the_depth_limit_is_exact() -> None:
    """Mutant: the depth test was ``len(path) > MAX_DEPTH``, letting one level more be built.

    Rule: at most ``MAX_DEPTH`` (100) nested collections load; one more is refused."""
    from agentgate._yaml import MAX_DEPTH

    data, _ = load_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="p.yaml")
    depth = 0
    while isinstance(data, list):
        depth, data = depth + 1, data[0] if data else None
    assert depth == MAX_DEPTH
    with pytest.raises(PolicyError, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), source="p.yaml")


# --- YAML: numbers and text ---------------------------------------------------------------------


def test_text_tagged_as_str_stays_text_even_when_it_looks_like_a_number() -> None:
    """Mutant: the YAML 1.2 number reading of plain scalars ignored a ``!!str`` tag, so
    ``!!str 1e3`` became 1000.0 and ``!!str 0o17`` became 15.

    Rule: an author who tags a value ``!!str`` gets text; only an untagged plain scalar is read
    as a YAML 1.2 number (and an anchor before the tag changes nothing)."""
    data, _ = load_yaml(
        "a: !!str 1e3\nb: !!str 0o17\nc: &x !!str -.5\nd: !!str 09\ne: 1e3\nf: 0o17\n", source="p.yaml"
    )
    assert data == {"a": "1e3", "b": "0o17", "c": "-.5", "d": "09", "e": 1000.0, "f": 15}


def test_an_untagged_decimal_with_a_leading_zero_is_refused_as_ambiguous() -> None:
    """Mutant: the leading-zero test of plain text scalars was dropped, so ``09`` (text to
    PyYAML's YAML 1.1 rule, 9 in YAML 1.2) loaded as the text "09".

    Rule: a number YAML versions read differently is refused with its place, never guessed."""
    for value in ("09", "-08", "0_9"):
        with pytest.raises(PolicyError, match="ambiguous number"):
            load_yaml(f"limit: {value}\n", source="p.yaml")
    assert load_yaml("limit: '09'\n", source="p.yaml")[0] == {"limit": "09"}


def test_an_integer_too_long_to_print_is_refused_whatever_its_base() -> None:
    """Mutant: the magnitude check after conversion was dropped; ``0x`` and 3,600 hex digits
    converts (only decimal text is bounded) into a number no message can print.

    Rule: an integer of more than 4,300 decimal digits is refused, in hex as in decimal."""
    with pytest.raises(PolicyError, match="number of 3602 characters"):
        load_yaml("a: 0x" + "f" * 3600 + "\n", source="p.yaml")
    assert load_yaml("a: 0x" + "f" * 100 + "\n", source="p.yaml")[0] == {"a": int("f" * 100, 16)}


@pytest.mark.parametrize(
    "text",
    [
        "a: !!timestamp 2026-01-31\n",
        "a: &d !!timestamp 2026-01-31\n",
        "a: !custom [1, 2]\n",
        "a: !!omap [{b: 1}]\n",
        "a: !!pairs [{b: 1}]\n",
    ],
)
def test_a_tag_on_a_date_or_a_list_is_refused(text: str) -> None:
    """Mutant: a tagged timestamp was read as text like a plain date (the tag test dropped), or
    a list's tag was not checked, so ``!custom [1, 2]`` and ``!!omap`` loaded as plain lists.

    Rule: only the core schema loads; any other tag, on a scalar or a list, is refused with its place."""
    with pytest.raises(PolicyError, match="is not allowed"):
        load_yaml(text, source="p.yaml")
    assert load_yaml("a: 2026-01-31\n", source="p.yaml")[0] == {"a": "2026-01-31"}


# --- lint ---------------------------------------------------------------------------------------

ROOT = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"
SVC = "did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj"
ALICE = "did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru"
HEAD = f"""version: 1
trust_anchors:
  root: {{did: {ROOT}}}
principals:
  svc: {{kind: service, did: {SVC}, roles: [r]}}
  alice: {{kind: human, did: {ALICE}}}
tools:
  pay.refund: {{args: {{amount: {{type: integer}}, note: {{type: string}}}}}}
  pay.void: {{args: {{amount: {{type: integer}}}}}}
"""


def _codes(body: str, code: str, head: str = HEAD) -> list[Finding]:
    return [f for f in lint(parse_policy(head + body, source="p.yaml")) if f.code == code]


def _role(extra: str = "", rule: str = '{resource: "tool:pay.refund"}') -> str:
    return f"roles:\n  r:\n    capabilities: [{rule}]\n    ttl_s: 600\n{extra}"


@pytest.mark.parametrize(
    ("constraint", "found"),
    [
        ("{gt: 1, lt: 2}", True),  # no whole number between: never matches an integer
        ("{gt: 1, le: 2}", False),
        ("{ge: 1, lt: 2}", False),
        ("{gt: 1.5, lt: 2}", True),
        ("{gt: 1.5, lt: 2.5}", False),
        ('{eq: "5"}', True),  # text, for an integer argument
        ("{in: [1.5, 2.5]}", True),  # no whole number listed
        ("{in: [1.5, 2]}", False),
        ('{prefix: "1"}', True),  # a prefix admits text only
    ],
)
def test_an_integer_constraint_that_admits_no_integer_is_a_type_mismatch(
    constraint: str, found: bool
) -> None:
    """Mutants: the least integer above ``gt`` was ``ceil(gt)`` (1 for ``gt: 1``), the greatest
    below ``lt`` was ``floor(lt)`` (2 for ``lt: 2``); every value "fitted" an integer; a prefix
    on an integer was accepted. Each made the linter silent on a rule that can never match.

    Rule: a constraint on an integer argument that no whole number satisfies is reported, and
    one that some whole number satisfies is not."""
    body = _role(rule=f'{{resource: "tool:pay.refund", constraints: {{amount: {constraint}}}}}')
    assert bool(_codes(body, "constraint_type_mismatch")) is found


def test_a_wildcard_gate_reports_each_tool_lacking_the_argument_it_looks_at() -> None:
    """Mutant: only the first tool a wildcard gate names was checked for the arguments its
    ``when`` looks at.

    Rule: a gate's condition on an argument one of its tools does not declare is reported for
    that tool, wherever it comes in the declaration order."""
    body = _role() + (
        "approvals:\n  big:\n    resource: tool:pay.*\n    when: {note: {prefix: x}}\n    approvers: [alice]\n"
    )
    found = _codes(body, "gate_on_undeclared_argument")
    assert [f.message for f in found] == [
        "approval gate big looks at note, which tool:pay.void does not declare"
    ]


def test_a_role_inheriting_a_budgeted_role_directly_is_told_it_has_no_budget() -> None:
    """Mutant: the roles searched for a budget skipped the role's first parent (``closure[2:]``).

    Rule: a role that inherits the rules of a role with a budget, and has none itself, is warned."""
    body = (
        "roles:\n  r:\n    inherits: [base]\n    ttl_s: 600\n"
        '  base:\n    capabilities: [{resource: "tool:pay.refund"}]\n    budget: {limit: 10, unit: calls}\n    ttl_s: 600\n'
    )
    found = _codes(body, "inherits_rules_not_budget")
    assert len(found) == 1 and "holds the rules of base but no budget" in found[0].message


def test_a_role_two_steps_from_the_rules_it_inherits_needs_a_ttl() -> None:
    """Mutants: ``role_without_ttl`` asked only for a role's own rules, or followed inheritance
    one step only, so a role that inherits (through another) every rule it holds had no TTL and
    no finding.

    Rule: every role that holds a rule, its own or one inherited at any depth, must have ttl_s."""
    body = (
        "roles:\n  r:\n    inherits: [mid]\n"
        "  mid:\n    inherits: [base]\n    ttl_s: 600\n"
        '  base:\n    capabilities: [{resource: "tool:pay.refund"}]\n    ttl_s: 600\n'
        "  empty: {}\n"
    )
    found = _codes(body, "role_without_ttl")
    assert [f.message for f in found] == ["role r has no ttl_s"]


def test_an_agent_holding_every_model_is_an_error() -> None:
    """Mutant: only ``tool:*`` was taken for a whole-kind wildcard, so ``model:*`` for an agent
    went unreported (or was a mere warning).

    Rule: an agent role holding every resource of a kind (``tool:*``, ``model:*``) is an error."""
    head = (
        HEAD.replace("kind: service", "kind: agent")
        + "models:\n  m1: {cost_per_mtok: {input: 1, output: 1}}\n"
    )
    for pattern in ("tool:*", "model:*"):
        found = _codes(_role(rule=f'{{resource: "{pattern}"}}'), "wildcard_capability_for_agent", head)
        assert len(found) == 1 and found[0].severity.value == "error", pattern


def test_an_agent_holding_a_trust_anchor_key_is_reported() -> None:
    """Mutant: the check for an agent principal holding a trust anchor's key was dropped.

    Rule: an agent with an anchor's key can issue itself any root grant: always an error."""
    head = HEAD.replace(f"svc: {{kind: service, did: {SVC}", f"svc: {{kind: agent, did: {ROOT}")
    found = _codes(_role(), "principal_without_key", head)
    assert any("holds the key of trust anchor root" in f.message for f in found)
    assert _codes(_role(), "principal_without_key") == []


@pytest.mark.parametrize(
    ("delegation", "code"),
    [
        ("{max_depth: 1, max_ttl_s: 60, budget: {limit: 5, unit: tokens}}", "delegated_budget_above_role"),
        ("{max_depth: 1}", "delegation_without_ttl"),
        ("{max_depth: 1, max_ttl_s: 900}", "delegated_ttl_above_delegator"),
    ],
)
def test_a_delegation_that_escapes_its_role_is_reported(delegation: str, code: str) -> None:
    """Mutants: a delegated budget in another unit than the role's passed (only the limits were
    compared); a delegation of depth 1 without max_ttl_s passed (``max_depth > 1``); a delegated
    grant living up to twice the role's TTL passed.

    Rule: a delegation may hand on no budget in a unit the role is not metered in, no grant
    without a life limit, and no grant outliving the delegator's."""
    extra = f"    budget: {{limit: 100, unit: calls}}\n    delegation: {delegation}\n"
    assert len(_codes(_role(extra), code)) == 1
    safe = "    budget: {limit: 100, unit: calls}\n    delegation: {max_depth: 1, max_ttl_s: 600, budget: {limit: 100, unit: calls}}\n"
    assert _codes(_role(safe), code) == []


def test_an_unaudited_tool_a_keyless_anchor_and_a_gate_no_value_meets_are_reported() -> None:
    """Mutants: ``tool_not_audited``, ``trust_anchor_without_key`` or the gate half of
    ``contradictory_constraint`` never reported.

    Rule: each of these policies is reported by its own code."""
    unaudited = HEAD.replace("pay.void: {args:", "pay.void: {audit: false, args:")
    assert len(_codes(_role(), "tool_not_audited", unaudited)) == 1
    keyless = HEAD.replace(f"root: {{did: {ROOT}}}", "root: {}")
    assert len(_codes(_role(), "trust_anchor_without_key", keyless)) == 1
    gate = "approvals:\n  g:\n    resource: tool:pay.refund\n    when: {amount: {gt: 5, lt: 3}}\n    approvers: [alice]\n"
    assert len(_codes(_role() + gate, "contradictory_constraint")) == 1


def test_a_quota_on_a_misspelt_tool_is_an_error() -> None:
    """Mutant: a quota counting an exact resource that is not declared went unreported.

    Rule: a quota that names an undeclared tool counts nothing, so the calls it was written to
    limit run without limit: an error on the quota's line."""
    quota = "quotas:\n  q:\n    principal: svc\n    window_s: 60\n    limit: 5\n    resources: [{0}]\n"
    found = _codes(_role() + quota.format("tool:pay.refnud"), "rule_for_undeclared_resource")
    assert len(found) == 1 and "quota q counts tool:pay.refnud" in found[0].message
    assert _codes(_role() + quota.format("tool:pay.refund"), "rule_for_undeclared_resource") == []


def test_delegating_another_action_than_the_role_holds_is_reported() -> None:
    """Mutant: the action of a delegated capability was taken as held whatever it was (only the
    resource was compared).

    Rule: a role may delegate only an action it holds on that resource (or one under ``*``)."""
    extra = '    delegation: {max_ttl_s: 60, capabilities: [{resource: "tool:pay.refund", action: admin}]}\n'
    found = _codes(_role(extra), "delegates_unheld_capability")
    assert len(found) == 1 and "which it does not hold" in found[0].message
    held = _role(extra, rule='{resource: "tool:pay.refund", action: "*"}')
    assert _codes(held, "delegates_unheld_capability") == []
