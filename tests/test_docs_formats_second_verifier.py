"""The docs' formats checked by verifiers written from the pages alone.

The token verifier below follows docs/token-format.md ("Verifying a chain", "Invocation",
"Deciding") with PyNaCl and the standard library only, and must reach each vector's expected
result in tests/vectors/; the audit verifier follows docs/audit-format.md (sections 1-3 and the
section 5 script, run as printed) against a log written by agentgate and exported with its
command line. Neither imports agentgate's parsing or hashing: they pin the pages, not the code.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted((ROOT / "tests" / "vectors" / "cases").glob("*.json"))
AGENTGATE = [sys.executable, "-m", "agentgate.cli.main"]

# --- docs/token-format.md, from the page alone -------------------------------------------------

B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
B64URL = re.compile(r"[A-Za-z0-9_-]*")
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX32 = re.compile(r"[0-9a-f]{32}")
UNIT = re.compile(r"[a-z][a-z0-9_]{0,31}")
RESOURCE = re.compile(r"(tool|model|gpu):[a-z0-9_-]+(\.[a-z0-9_-]+)*")
ACTION = re.compile(r"[a-z][a-z0-9_]{0,199}|\*")
ARGUMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
GRANT_FIELDS = {"v", "iss", "aud", "caps", "budget", "nbf", "exp", "depth", "nonce", "purpose", "parent"}
INVOCATION_FIELDS = {"v", "iss", "tip", "res", "act", "args", "nonce", "iat", "exp"}
SKEW = 30


class Refused(Exception):
    """The page's verifier refuses: ``code`` is "format" or a finding code."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def b58decode(text: str) -> bytes:
    number = 0
    for ch in text:
        if ch not in B58:
            raise Refused("format")
        number = number * 58 + B58.index(ch)
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


def b58encode(data: bytes) -> str:
    number, out = int.from_bytes(data, "big"), ""
    while number:
        number, digit = divmod(number, 58)
        out = B58[digit] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def did_key(did: object) -> bytes:
    """The 32-byte key of a did:key (56 characters, multicodec 0xed 0x01, canonical base58)."""
    if not isinstance(did, str) or len(did) != 56 or not did.startswith("did:key:z6Mk"):
        raise Refused("format")
    raw = b58decode(did[len("did:key:z") :])
    if len(raw) != 34 or raw[:2] != b"\xed\x01" or b58encode(raw) != did[len("did:key:z") :]:
        raise Refused("format")
    return raw[2:]


def b64url(part: str) -> bytes:
    if not B64URL.fullmatch(part) or len(part) % 4 == 1:
        raise Refused("format")
    data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    if base64.urlsafe_b64encode(data).rstrip(b"=").decode() != part:
        raise Refused("format")  # non-canonical trailing bits
    return data


def canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def parse_canonical(data: bytes) -> Any:
    def no_float(text: str) -> Any:
        raise Refused("format")

    try:
        value = json.loads(data.decode("utf-8"), parse_float=no_float, parse_constant=no_float)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused("format") from exc
    if canonical(value) != data:
        raise Refused("format")
    return value


def is_int(value: object) -> bool:
    return type(value) is int


def check_grant(payload: Any) -> dict[str, Any]:
    """The table of "Grant payload": exact fields, types and ranges."""
    if not isinstance(payload, dict):
        raise Refused("format")
    extra = set(payload) - GRANT_FIELDS
    if "crit" in extra or not extra <= {"ext"} or not set(payload) >= GRANT_FIELDS:
        raise Refused("format")
    p = payload
    ok = (
        p["v"] == 1
        and is_int(p["v"])
        and isinstance(p["caps"], list)
        and 1 <= len(p["caps"]) <= 16
        and is_int(p["nbf"])
        and is_int(p["exp"])
        and 0 <= p["nbf"] < p["exp"] < 2**40
        and is_int(p["depth"])
        and 0 <= p["depth"] <= 15
        and isinstance(p["nonce"], str)
        and HEX32.fullmatch(p["nonce"]) is not None
        and isinstance(p["purpose"], str)
        and len(p["purpose"]) <= 256
        and (
            p["parent"] is None or (isinstance(p["parent"], str) and HEX64.fullmatch(p["parent"]) is not None)
        )
    )
    budget = p["budget"]
    if budget is not None:
        ok = ok and (
            isinstance(budget, dict)
            and set(budget) == {"amount", "unit"}
            and is_int(budget["amount"])
            and 0 <= budget["amount"] <= 2**63 - 1
            and isinstance(budget["unit"], str)
            and UNIT.fullmatch(budget["unit"]) is not None
        )
    if not ok:
        raise Refused("format")
    did_key(p["iss"])
    did_key(p["aud"])
    for cap in p["caps"]:
        if not (
            isinstance(cap, dict)
            and set(cap) == {"resource", "action", "constraints"}
            and isinstance(cap["resource"], str)
            and isinstance(cap["action"], str)
            and ACTION.fullmatch(cap["action"]) is not None
            and isinstance(cap["constraints"], dict)
            and all(len(name) <= 200 and ARGUMENT.fullmatch(name) for name in cap["constraints"])
        ):
            raise Refused("format")
    return p


def parse_chain(token: str) -> list[tuple[bytes, bytes, dict[str, Any]]]:
    """Steps 1 and 2: size, prefix, segments, strict base64url, canonical payloads."""
    if len(token) > 32 * 1024 or not token.isascii():
        raise Refused("format")
    parts = token.split(".", 33)
    rest = parts[1:]
    if parts[0] != "ag1" or not rest or len(rest) % 2 or len(rest) > 32:
        raise Refused("format")
    links = []
    for k in range(0, len(rest), 2):
        payload, sig = b64url(rest[k]), b64url(rest[k + 1])
        if len(payload) > 8 * 1024 or len(sig) != 64:
            raise Refused("format")
        links.append((payload, sig, check_grant(parse_canonical(payload))))
    return links


def allowed(value: object, ops: dict[str, Any]) -> bool:
    """Whether one argument value meets one argument's constraint (every operator)."""
    for op, bound in ops.items():
        number = is_int(value)
        if op == "eq" and not (type(value) is type(bound) and value == bound):
            return False
        if op == "in" and not any(type(value) is type(b) and value == b for b in bound):
            return False
        if op in ("lt", "le", "gt", "ge") and not number:
            return False
        if op == "lt" and not value < bound:
            return False
        if op == "le" and not value <= bound:
            return False
        if op == "gt" and not value > bound:
            return False
        if op == "ge" and not value >= bound:
            return False
        if op == "prefix" and not (isinstance(value, str) and value.startswith(bound)):
            return False
    return True


def resource_within(child: str, parent: str) -> bool:
    if parent == child:
        return True
    if parent.endswith(".*"):
        return child.startswith(parent[:-1])
    return parent.endswith(":*") and child.split(":")[0] == parent.split(":")[0]


def constraint_within(child: dict[str, Any], parent: dict[str, Any]) -> bool:
    """Whether every value ``child`` allows, ``parent`` allows (the cases the vectors use)."""
    finite = child.get("in", [child["eq"]] if "eq" in child else None)
    if finite is not None:
        return all(allowed(v, child) <= allowed(v, parent) for v in finite)
    upper = [child[o] - (o == "lt") for o in ("lt", "le") if o in child]
    lower = [child[o] + (o == "gt") for o in ("gt", "ge") if o in child]
    for op, bound in parent.items():
        if op in ("le", "lt") and not (upper and min(upper) <= bound - (op == "lt")):
            return False
        if op in ("ge", "gt") and not (lower and max(lower) >= bound + (op == "gt")):
            return False
        if op in ("eq", "in"):
            return False
        if op == "prefix" and not str(child.get("prefix", "")).startswith(bound):
            return False
    return True


def attenuation(child: dict[str, Any], parent: dict[str, Any]) -> str | None:
    """The finding code when capability ``child`` is no attenuation of ``parent`` (else None)."""
    if child["action"] != parent["action"] or not resource_within(child["resource"], parent["resource"]):
        return "capability_widened"
    for arg, ops in parent["constraints"].items():
        if arg not in child["constraints"] or not constraint_within(child["constraints"][arg], ops):
            return "constraint_widened"
    return None


def verify_chain(token: str, trusted: list[str], now: int) -> list[dict[str, Any]]:
    """Steps 1-6 of "Verifying a chain"; returns the links' payloads, raises ``Refused``."""
    links = parse_chain(token)
    if links[0][2]["parent"] is not None:
        raise Refused("root_has_parent")
    if links[0][2]["iss"] not in trusted:
        raise Refused("untrusted_root")
    for payload, sig, fields in links:
        try:
            VerifyKey(did_key(fields["iss"])).verify(b"agentgate/grant/v1\x00" + payload, sig)
        except BadSignatureError as exc:
            raise Refused("bad_signature") from exc
    seen = {links[0][2]["iss"], links[0][2]["aud"]}
    for (prev_bytes, _, prev), (_, _, link) in itertools.pairwise(links):
        if link["parent"] != hashlib.sha256(prev_bytes).hexdigest():
            raise Refused("parent_mismatch")
        if link["iss"] != prev["aud"]:
            raise Refused("issuer_not_parent_audience")
        if link["aud"] == link["iss"]:
            raise Refused("self_delegation")
        if link["aud"] in seen:
            raise Refused("delegation_cycle")
        seen.add(link["aud"])
        if prev["depth"] <= 0:
            raise Refused("delegation_not_allowed")
        if link["depth"] > prev["depth"] - 1:
            raise Refused("depth_widened")
        for cap in link["caps"]:
            codes = [attenuation(cap, parent_cap) for parent_cap in prev["caps"]]
            if None not in codes:
                raise Refused(
                    "capability_widened" if set(codes) == {"capability_widened"} else "constraint_widened"
                )
        if prev["budget"] is not None:
            if link["budget"] is None:
                raise Refused("budget_widened")
            if link["budget"]["unit"] != prev["budget"]["unit"]:
                raise Refused("budget_unit_changed")
            if link["budget"]["amount"] > prev["budget"]["amount"]:
                raise Refused("budget_widened")
        if link["exp"] > prev["exp"]:
            raise Refused("outlives_parent")
        if link["nbf"] < prev["nbf"]:
            raise Refused("starts_before_parent")
    time_check(links, now)
    return [fields for _, _, fields in links]


def time_check(links: list[tuple[bytes, bytes, dict[str, Any]]], now: int) -> None:
    for _, _, fields in links:
        if not now < fields["exp"]:
            raise Refused("grant_expired")
        if not now + SKEW >= fields["nbf"]:
            raise Refused("grant_not_yet_valid")


def decide(case: dict[str, Any]) -> str:
    """ "Deciding", steps 1-6 (an empty store: nothing revoked, no nonce seen); "allow" or a code."""
    now, call = case["now"], case["call"]
    try:
        links = parse_chain(case["token"])
    except Refused:
        return "malformed_token"
    try:
        verify_chain(case["token"], case["trusted"], now=-(2**62))  # steps 1-5 alone
    except Refused as exc:
        if exc.code not in ("grant_not_yet_valid",):
            return exc.code
    tip_bytes, _, tip = links[-1]
    prefix, body, sig_text = case["invocation"].split(".")
    assert prefix == "agi1" and len(case["invocation"]) <= 4096
    payload, sig = b64url(body), b64url(sig_text)
    inv = parse_canonical(payload)
    assert set(inv) == INVOCATION_FIELDS and inv["v"] == 1
    if not inv["iat"] < inv["exp"] <= inv["iat"] + 300:
        return "malformed_token"  # the table's range for `exp`: refused with the wire form
    if inv["iss"] != tip["aud"]:
        return "wrong_holder"
    if inv["tip"] != hashlib.sha256(tip_bytes).hexdigest():
        return "tip_mismatch"
    try:
        VerifyKey(did_key(inv["iss"])).verify(b"agentgate/invocation/v1\x00" + canonical(inv), sig)
    except BadSignatureError:
        return "bad_invocation_signature"
    if not RESOURCE.fullmatch(call["resource"]):
        return "ambiguous_resource"
    if (call["resource"], call["action"]) != (inv["res"], inv["act"]):
        return "call_mismatch"
    if hashlib.sha256(canonical(call["args"])).hexdigest() != inv["args"]:
        return "args_digest_mismatch"
    if not now < inv["exp"]:
        return "invocation_expired"
    if not inv["iat"] <= now + SKEW:
        return "invocation_not_yet_valid"
    try:
        time_check(links, now)
    except Refused as exc:
        return exc.code
    for cap in tip["caps"]:
        if (
            resource_within(call["resource"], cap["resource"])
            and cap["action"] == call["action"]
            and all(
                arg in call["args"] and allowed(call["args"][arg], ops)
                for arg, ops in cap["constraints"].items()
            )
        ):
            return "allow"
    return "call_not_covered"


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_a_verifier_written_from_the_token_page_alone_agrees_with_every_vector(path: Path) -> None:
    case = load(path)
    expect = case["expect"]
    if case["kind"] == "decision":
        assert decide(case) == expect.get("code", expect["outcome"])
        return
    if expect["valid"]:
        links = verify_chain(case["token"], case["trusted"], case["now"])
        ids = [hashlib.sha256(canonical(link)).hexdigest() for link in links]
        assert ids == expect["ids"] and links[-1]["aud"] == expect["holder"]
        return
    with pytest.raises(Refused) as refused:
        verify_chain(case["token"], case["trusted"], case["now"])
    assert refused.value.code == expect["error"]


def test_the_token_pages_example_payload_is_the_vectors_root_with_the_id_it_names() -> None:
    page = (ROOT / "docs" / "token-format.md").read_text()
    block = page.split("Example root payload", 1)[1].split("```\n", 2)[1]
    payload = "".join(block.split("\n")).encode()
    named = re.search(r"Its id is `([0-9a-f]{64})`", page)
    assert named is not None and hashlib.sha256(payload).hexdigest() == named.group(1)
    case = load(ROOT / "tests" / "vectors" / "cases" / "valid-root.json")
    assert b64url(case["token"].split(".")[1]) == payload
    seed = bytes.fromhex(json.loads((ROOT / "tests" / "vectors" / "keys.json").read_text())["root"]["seed"])
    assert seed == b"\x01" * 32


def test_the_vector_keys_are_the_did_keys_of_their_seeds() -> None:
    for name, key in json.loads((ROOT / "tests" / "vectors" / "keys.json").read_text()).items():
        public = bytes(SigningKey(bytes.fromhex(key["seed"])).verify_key)
        assert "did:key:z" + b58encode(b"\xed\x01" + public) == key["did"], name
        assert did_key(key["did"]) == public


# --- docs/audit-format.md, from the page alone -------------------------------------------------

ENTRY_FIELDS = {
    "v", "index", "time", "kind", "principal", "chain_hash", "policy_hash", "rule", "resource",
    "args_digest", "args", "approver", "budget_delta", "reasons", "status", "ref",
}  # fmt: skip
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"
HOSTILE_ARGS: list[dict[str, Any]] = [
    {"plain": 1},
    {"text": 'é "q" \\ \b\t\n\f\r \x00\x1f\x7f / \u2028\u2029 😀', "neg": -0.0},
    {"floats": [1.0, 0.0001, 1e16, 1e-05, 2.5e-08, 1.7976931348623157e308, 0.1]},
    {"big": 2**80, "nested": {"b": [True, False, None], "a": {}}},
    {"ключ": "значение"},
]


def mth(leaves: list[bytes]) -> bytes:
    """Section 2: the RFC 9162 tree hash of leaf hashes."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + mth(leaves[:k]) + mth(leaves[k:])).digest()


def open_note(note: str, name: str, public: bytes) -> tuple[str, int, bytes]:
    """Section 3: the checkpoint of a signed note, its signature checked with ``public``."""
    text, signatures = note.split("\n\n", 1)
    text += "\n"
    key_id = hashlib.sha256(name.encode() + b"\n\x01" + public).digest()[:4]
    for line in signatures.rstrip("\n").split("\n"):
        assert line.startswith("\u2014 ")
        signer, blob_text = line[2:].rsplit(" ", 1)
        blob = base64.b64decode(blob_text, validate=True)
        if signer == name and blob[:4] == key_id:
            VerifyKey(public).verify(text.encode(), blob[4:])
            origin, size, root = text.split("\n")[:3]
            assert origin == name
            return origin, int(size), base64.b64decode(root, validate=True)
    raise AssertionError("no signature by the log key")


@pytest.fixture
def exported_log(tmp_path: Path) -> dict[str, Any]:
    """A log of several entries written by agentgate, exported with its command line."""
    from agentgate.store import SQLiteStore
    from agentgate.store.audit import AuditLog, open_log_key

    env = {
        **os.environ,
        "AGENTGATE_STORE": str(tmp_path / "a.db"),
        "AGENTGATE_LOG_KEY": str(tmp_path / "log.key"),
    }
    store = SQLiteStore(tmp_path / "a.db")
    try:
        os.environ["AGENTGATE_LOG_KEY"] = env["AGENTGATE_LOG_KEY"]
        log = AuditLog(store, open_log_key(store))
        for k, args in enumerate(HOSTILE_ARGS):
            log.append(
                {"kind": "allow", "principal": DID, "resource": "tool:x", "args": args, "reasons": ["r"]}
            )
            log.append(
                {"kind": "outcome", "principal": DID, "resource": "tool:x", "ref": 2 * k, "status": "ok"}
            )
    finally:
        os.environ.pop("AGENTGATE_LOG_KEY", None)
        store.close()

    def cli(*argv: str) -> str:
        done = subprocess.run([*AGENTGATE, *argv], cwd=tmp_path, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.decode()

    printed = cli("audit", "checkpoint", "--out", "cp.note")
    lines = subprocess.run(
        [*AGENTGATE, "audit", "show", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout.split(b"\n")
    assert lines[-1] == b""
    return {"dir": tmp_path, "cli": cli, "lines": lines[:-1], "printed": printed}


def test_an_exported_log_and_checkpoint_verify_by_the_audit_page_alone(exported_log: dict[str, Any]) -> None:
    tmp = exported_log["dir"]
    public = did_key((tmp / "log.pub").read_text().strip())
    lines: list[bytes] = exported_log["lines"]
    assert len(lines) == 2 * len(HOSTILE_ARGS)
    for index, line in enumerate(lines):
        fields = json.loads(line)
        assert set(fields) == ENTRY_FIELDS and fields["index"] == index and fields["v"] == 1
        assert TIME.fullmatch(fields["time"]) and canonical(fields) == line
    assert [json.loads(lines[2 * k])["args"] for k in range(len(HOSTILE_ARGS))] == HOSTILE_ARGS
    origin, size, root = open_note((tmp / "cp.note").read_text(), "agentgate.local/audit", public)
    assert size == len(lines)
    assert mth([hashlib.sha256(b"\x00" + line).digest() for line in lines]) == root
    # the verifier key `audit checkpoint` prints: name+hex(key id)+base64(0x01 || key)
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
    encoded = base64.b64encode(b"\x01" + public).decode()
    vkey = f"{origin}+{key_id.hex()}+{encoded}"
    assert f"verifier key: {vkey}" in exported_log["printed"]
    # an edited entry no longer folds to the signed root
    edited = [*lines[:3], lines[3].replace(b'"ok"', b'"no"'), *lines[4:]]
    assert mth([hashlib.sha256(b"\x00" + line).digest() for line in edited]) != root


def section_five_script() -> str:
    page = (ROOT / "docs" / "audit-format.md").read_text()
    return page.split("## 5. Verifying by hand", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def test_the_pages_verify_by_hand_script_runs_as_printed_on_every_proof(
    exported_log: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgate.cli.main import main

    tmp, script = exported_log["dir"], section_five_script()
    # `audit prove` in process (the same command, store and log key as the fixture's processes):
    # what is under test is the page's script, run on each proof the command wrote.
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp / "a.db"))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp / "log.key"))
    cwd = Path.cwd()
    os.chdir(tmp)
    try:
        last = len(exported_log["lines"]) - 1
        for index in (0, 3, 4, last):  # a left edge, inner nodes, and the right edge of an unbalanced tree
            assert main(["audit", "prove", str(index), "--out", "entry.tlog-proof"]) == 0, capsys.readouterr()
            capsys.readouterr()
            exec(compile(script, "audit-format.md", "exec"), {})
            kind = "allow" if index % 2 == 0 else "outcome"
            assert capsys.readouterr().out == f"{kind} {DID} tool:x\n"
        # a witness's cosignature, ahead of the log's own line, is skipped
        text = (tmp / "entry.tlog-proof").read_text()
        head, checkpoint = text.split("\n\n", 1)
        body, signatures = checkpoint.split("\n\n", 1)
        witness = SigningKey(b"\x09" * 32)
        wid = hashlib.sha256(b"witness.example\n\x01" + bytes(witness.verify_key)).digest()[:4]
        cosigned = base64.b64encode(wid + witness.sign((body + "\n").encode()).signature).decode()
        (tmp / "entry.tlog-proof").write_text(
            f"{head}\n\n{body}\n\n\u2014 witness.example {cosigned}\n{signatures}"
        )
        exec(compile(script, "audit-format.md", "exec"), {})
        assert capsys.readouterr().out == f"outcome {DID} tool:x\n"
        bundle = text.split("\n")
        entry = base64.b64decode(bundle[1].removeprefix("extra "))
        bundle[1] = "extra " + base64.b64encode(entry.replace(b'"ok"', b'"no"')).decode()
        (tmp / "entry.tlog-proof").write_text("\n".join(bundle))
        with pytest.raises(SystemExit, match="not in the signed tree"):
            exec(compile(script, "audit-format.md", "exec"), {})
        bundle = text.split("\n")
        bundle[2] = f"index {last + 1}"
        (tmp / "entry.tlog-proof").write_text("\n".join(bundle))
        with pytest.raises(SystemExit, match="beyond the signed tree"):
            exec(compile(script, "audit-format.md", "exec"), {})
    finally:
        os.chdir(cwd)


# --- docs/operations.md: least privilege, run as printed ----------------------------------------


def operations_block(lang: str, after: str) -> str:
    page = (ROOT / "docs" / "operations.md").read_text()
    return page.split(after, 1)[1].split(f"```{lang}\n", 1)[1].split("\n```\n", 1)[0]


@pytest.mark.postgres
def test_the_least_privilege_set_up_as_printed_lets_the_application_role_run_every_part(
    postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the page said to create the schema with `agentgate audit checkpoint` as the owner,
    which creates the audit tables only; the application role then failed on every other part
    with "permission denied for schema public".

    The page's shell block runs as printed (bash, real processes); the application role's
    commands then run in process (``agentgate.cli.main.main``, the same code, the same
    ``AGENTGATE_STORE``, the same server and role): what is proven is the role's rights."""
    import psycopg

    from agentgate.cli.main import main

    admin = postgres_server.url()
    with psycopg.connect(admin, autocommit=True) as conn:
        for role in ("r18_owner", "agentgate_app"):
            conn.execute(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') "
                f"THEN CREATE ROLE {role} LOGIN; END IF; END $$"
            )
        conn.execute("DROP DATABASE IF EXISTS r18_ops")
        conn.execute("CREATE DATABASE r18_ops OWNER r18_owner")
    user = f"postgresql://{postgres_server.user}@"
    owner = admin.replace(user, "postgresql://r18_owner@").replace("/postgres?", "/r18_ops?")
    app = owner.replace("r18_owner@", "agentgate_app@")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("AGENTGATE_LOG_KEY", None)
    script = operations_block("sh", "create them all:")
    script = re.sub(r"export AGENTGATE_STORE=\S+", f"export AGENTGATE_STORE='{owner}'", script)
    done = subprocess.run(
        ["bash", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(operations_block("sql", "what it needs:"))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", app)
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = main(list(argv))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(argv), code, out.out, out.err)

    for name in ("root", "agent"):
        assert cli("keys", "new", name, "--dir", "keys").returncode == 0
    issued = cli(
        "grant",
        "issue",
        "--issuer",
        "keys/root.key",
        "--to",
        "keys/agent.pub",
        "--allow",
        "tool:x",
        "--ttl",
        "1h",
        "--out",
        "a.tok",
    )
    assert issued.returncode == 0, issued.stderr
    check = (
        "grant",
        "check",
        "a.tok",
        "--as",
        "keys/agent.key",
        "--trust",
        "keys/root.pub",
        "--tool",
        "x",
        "--args",
        "{}",
    )
    for argv in (
        check,
        ("tasks", "dead-letters"),
        ("tasks", "breakers"),
        ("broker", "leases"),
        ("audit", "verify"),
    ):
        done = cli(*argv)
        assert done.returncode == 0, (argv, done.stderr)
    assert cli("grant", "revoke", "a.tok").returncode == 0
    assert "revoked" in cli(*check).stdout
    with psycopg.connect(app, autocommit=True) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("UPDATE audit_log SET entry = entry")


# --- docs/lint.md and docs/concepts.md, run as printed ------------------------------------------


def page_block(page: str, after: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    return text.split(after, 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def run_cli(capsys: pytest.CaptureFixture[str], line: str) -> tuple[int, str]:
    """One documented command line (``agentgate ...``, continuation lines joined), in process."""
    import shlex

    from agentgate.cli.main import main

    argv = shlex.split(line.replace("\\\n", " "))
    assert argv[0] == "agentgate"
    code = main(argv[1:])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_the_lint_pages_example_is_what_the_linter_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "policies").mkdir()
    corpus = ROOT / "tests" / "corpus" / "021-delegation-wider-than-role" / "policy.yaml"
    (tmp_path / "policies" / "bad.yaml").write_text(corpus.read_text())
    monkeypatch.chdir(tmp_path)
    code, out = run_cli(capsys, "agentgate policy lint policies/bad.yaml")
    assert code == 1 and out == page_block("lint.md", "a message, and a fix hint:")
    code, out = run_cli(capsys, "agentgate policy lint policies/bad.yaml --json")
    printed = json.loads(out)
    assert code == 1 and printed["valid"] is True and set(printed) == {"file", "valid", "findings"}
    assert set(printed["findings"][0]) == {"kind", "code", "message", "severity", "file", "line", "hint"}


def test_the_concepts_walkthrough_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    setup = page_block("concepts.md", "run it in an empty directory):")
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    for line in setup.replace("\\\n", " ").splitlines()[1:]:
        assert run_cli(capsys, line.split("  #")[0])[0] == 0, line
    for after in ("### 1. Scope creep", "### 3. Non-revocable grant"):
        block = page_block("concepts.md", after)
        printed = block.split("\n", 2)
        command = printed[0].removeprefix("$ ") + "\n" + printed[1]
        code, out = run_cli(capsys, command)
        assert code == 1 and out.startswith(printed[2].split(":")[0] + ":"), out
        first = " ".join(printed[2].split("\n$ ")[0].split("...")[0].split())
        assert " ".join(out.split()).startswith(first), (first, out)
    delegate = page_block("concepts.md", "to the refunder's own key:")
    assert run_cli(capsys, delegate)[0] == 0
    copied = page_block("concepts.md", "token:\n").split("\n")
    code, out = run_cli(capsys, copied[0].removeprefix("$ ") + "\n" + copied[1])
    assert (
        code == 1
        and out.startswith("deny: invocation signed by did:key:z6Mk")
        and "wrong_holder [audience]" in out
    )
    revoke = page_block("concepts.md", "every link of the chain against the store:").split("\n")
    code, out = run_cli(capsys, revoke[0].removeprefix("$ "))
    assert (
        code == 0 and out.startswith("revoked ") and "1 recorded descendant grant(s) are dead with it" in out
    )
    code, out = run_cli(capsys, revoke[3].removeprefix("$ ") + "\n" + revoke[4])
    assert code == 1 and "of this chain was revoked; every grant below a revoked grant is dead" in out
    assert "non_revocable_grant revoked:" in out


def test_the_token_pages_decision_order_agrees_with_agentgate_on_mutated_calls(tmp_path: Path) -> None:
    """Differential: the decision vector re-signed with mutated times, holders, tools, arguments and
    clocks; the page's verifier and agentgate's `decide` must name the same first finding."""
    import random

    from nacl.signing import SigningKey as NaclKey

    from agentgate.authority import GrantRepository, Invocation
    from agentgate.authority import decide as agentgate_decide
    from agentgate.capabilities import Call
    from agentgate.errors import AgentGateError
    from agentgate.store import SQLiteStore

    base = load(ROOT / "tests" / "vectors" / "cases" / "decision-allow.json")
    keys = json.loads((ROOT / "tests" / "vectors" / "keys.json").read_text())
    signer = {k["did"]: NaclKey(bytes.fromhex(k["seed"])) for k in keys.values()}
    original = parse_canonical(b64url(base["invocation"].split(".")[1]))
    rng = random.Random(18)
    store = SQLiteStore(tmp_path / "v.db")
    repo = GrantRepository(store)
    seen: dict[str, int] = {}
    try:
        for _ in range(300):
            inv = dict(original)
            call = json.loads(json.dumps(base["call"]))
            inv["nonce"] = f"{rng.getrandbits(128):032x}"
            inv["iat"] = original["iat"] + rng.choice([-700, -40, -1, 0, 5, 31, 200, 500])
            inv["exp"] = inv["iat"] + rng.choice([1, 60, 300, 300, 60, 301, 0])
            issuer = rng.choice([original["iss"], original["iss"], keys["alice"]["did"]])
            inv["iss"] = issuer
            forged = rng.random() < 0.1
            if rng.random() < 0.1:
                inv["tip"] = "0" * 64
            if rng.random() < 0.15:
                call["resource"] = rng.choice(
                    ["tool:payments.refund\u200b", "tool:payments.refunds", "Tool:x"]
                )
            if rng.random() < 0.15:
                inv["res"] = "tool:payments.refunds"
            amount = rng.choice([50, 100, 101, 150])
            call["args"] = {"amount": amount, "currency": rng.choice(["EUR", "EUR", "USD"])}
            signed_args = call["args"] if rng.random() < 0.85 else {"amount": 1, "currency": "EUR"}
            inv["args"] = hashlib.sha256(canonical(signed_args)).hexdigest()
            payload = canonical(inv)
            key = signer[keys["mallory"]["did"]] if forged else signer[issuer]
            sig = key.sign(b"agentgate/invocation/v1\x00" + payload).signature
            wire = f"agi1.{base64.urlsafe_b64encode(payload).rstrip(b'=').decode()}.{base64.urlsafe_b64encode(sig).rstrip(b'=').decode()}"
            now = original["iat"] + rng.choice([-100, -31, 0, 30, 59, 60, 300, 600, 3600])
            case = {**base, "invocation": wire, "call": call, "now": now}
            ours = decide(case)
            try:
                invocation = Invocation.decode(
                    wire, base["token"], Call(call["resource"], call["action"], call["args"])
                )
            except AgentGateError:
                theirs = "malformed_token"
            else:
                decision = agentgate_decide(invocation, repo=repo, trusted=base["trusted"], now=now)
                theirs = decision.findings[0].code if decision.findings else decision.outcome.value
            assert ours == theirs, (inv, call, now)
            seen[ours] = seen.get(ours, 0) + 1
    finally:
        repo.close()
        store.close()
    assert len(seen) >= 10, seen  # the mutations reach most steps of the order


def test_a_gate_decisions_entry_digests_and_redacts_the_arguments_as_the_audit_page_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Section 1: `args_digest` is sha256: + SHA-256 of the canonical JSON of the **full** call
    arguments (floats as Python's repr); `args` holds only what the policy marks loggable."""
    import shutil

    from agentgate import Gate
    from agentgate.capabilities import Call
    from agentgate.keys import SigningKey as AgentKey

    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    root, agent = AgentKey.generate(), AgentKey.generate()
    (tmp_path / "policies" / "keys" / "ops-root.pub").write_text(root.did + "\n")
    (tmp_path / "policies" / "keys" / "support-agent.pub").write_text(agent.did + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "a.db"))
    args = {"order_id": "o-1", "amount": 12.5, "currency": "EUR", "reason": "card 4111 PAN-SECRET \u2028 é"}
    gate = Gate.open("policies/support.yaml")
    try:
        identity = gate.issue(root, name="support-agent", key=agent, role="support-agent")
        auth = gate.authorize(identity, Call("tool:payments.refund", "invoke", args), agent="support-agent")
        assert auth.allowed
        gate.run(auth, lambda: "refunded")
    finally:
        gate.close()
    code, out = run_cli(capsys, "agentgate audit show --json")
    assert code == 0
    lines = out.encode().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["kind"] for e in entries] == ["allow", "allow", "outcome"]
    decision, outcome = entries[1], entries[2]
    full = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert decision["args_digest"] == "sha256:" + hashlib.sha256(full).hexdigest()
    assert decision["args"] == {"order_id": "o-1", "amount": 12.5, "currency": "EUR"}  # reason dropped
    # Not "4111" alone: four hex digits of a hash or a signature are "4111" now and then (review
    # R68 saw this fail once in a run); ten characters never are by chance.
    assert b"PAN-SECRET" not in b"".join(lines)
    assert decision["principal"] == agent.did and decision["resource"] == "tool:payments.refund"
    assert outcome["ref"] == decision["index"] and outcome["status"] == "ok"
    issued = entries[0]  # "What each kind records": a root grant, by the anchor that signed it
    assert issued["principal"] == root.did and issued["resource"] == "agent:support-agent"
    assert issued["chain_hash"] == decision["chain_hash"] == identity.chain.tip.id  # bare hex, no prefix
    policy = (tmp_path / "policies" / "support.yaml").read_bytes()
    # docs/audit-format.md, "Recomputing policy_hash": the policy names key files, so the hash
    # covers the file's hash and the did:key each principal and trust anchor resolved to.
    from agentgate.policy import load_policy

    loaded = load_policy(tmp_path / "policies" / "support.yaml")
    document = {
        "file": hashlib.sha256(policy).hexdigest(),
        "principals": dict(loaded.principal_dids),
        "trust_anchors": dict(loaded.anchor_dids),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert decision["policy_hash"] == hashlib.sha256(text.encode()).hexdigest()
    assert decision["rule"].startswith("role support-agent rule ")
    assert all(canonical(e) == line for e, line in zip(entries, lines, strict=True))
