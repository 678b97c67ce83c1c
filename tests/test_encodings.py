"""Text encodings, locales and file formats at every input surface.

Inputs reach agentgate as YAML policies, key and token files, approval payloads, JSON on the
command line, environment variables and names written into policies and tokens; they come back
out in audit entries, CLI tables and trees. These tests run the real command (in-process through
``main`` where the locale does not matter, as a subprocess where it does) on real files and a real
SQLite store.

What holds:

- A policy with a UTF-8 BOM, CRLF, lone CR or NEL line endings loads as the LF file does, and
  reports an error at the same ``line:column``. UTF-16 and UTF-32 (with BOM), invalid UTF-8 (a
  stray byte, a CESU-8 surrogate, an overlong form), NUL, C1 (CSI ``\\x9b``) and raw ESC
  characters and tab indentation are exit 2 with one ``agentgate: error: FILE:LINE:COL:`` line
  (escaped, never a traceback), and ``lint --json`` gives the same line.
- Private keys (PEM) with CRLF, CR or a BOM load; tokens with a CRLF end load; a token with a
  BOM, in UTF-16 or with a NUL is exit 2 naming the file. An approval payload pretty-printed with
  CRLF signs; one with a BOM or in UTF-16 is exit 2 naming the file.
- Names in a policy are ASCII: a principal or tool spelled with a non-ASCII letter is refused with
  its line, in NFC and in NFD, so two names that differ only by normalization cannot both exist.
  Constraint values are compared exactly, never normalized: an NFD argument does not match an NFC
  value (deny), in ``policy explain`` and at the Gate.
- Store, key and output paths with spaces, non-ASCII and undecodable bytes work
  (``AGENTGATE_STORE``, ``--dir``, ``--out``), and an error naming an undecodable path is one line
  with ``\\udcff`` under ``LC_ALL=C``.
- Under ``LC_ALL=C`` (with or without UTF-8 mode) and ``PYTHONIOENCODING=ascii:strict``, output
  holding CJK, RTL, emoji and combining text is UTF-8 on standard output, without
  UnicodeEncodeError; ``audit show`` escapes ESC and bidi overrides an agent put in its arguments.
- Fixed here (agentgate/cli/_common.py): a reading command given ``AGENTGATE_STORE=/x/s.db\r``
  (an env file saved with CRLF) said ``no store at /x/s.db``, naming a file that exists, because
  the line break vanished into the one error line; the path is now printed escaped and the stray
  white space named.

Fixed by the lead in review r38 (plain tests now): the CLI's one error line is escaped
(agentgate/cli/main.py: a hostile token's resource sent ESC/OSC/BEL and U+202E verbatim through
``grant inspect``, ``check``, ``revoke``); a ``.pub`` file with a malformed ``did:key`` is named
in the error, and one with a UTF-8 BOM loads (agentgate/keys.py); ``policy lint``'s summary line
escapes the file name (agentgate/cli/policy.py); ``open_store`` refuses a path with white space
or a line break at an end (agentgate/store/__init__.py: ``grant revoke`` wrote the revocation to
a new file beside the real store).

Fixed in session 13 (was a strict xfail): arguments were decoded with the locale's encoding, not
as UTF-8 as docs/cli.md says ("any other argument must be UTF-8 text"). Under an ASCII locale
(``LC_ALL=C PYTHONUTF8=0``) ``--args '{"cur":"€"}'`` was refused as not encodable; under a
Latin-1 locale it silently became ``'â\\x82¬'`` and an allowed call was reported DENY. Text
arguments now go through ``agentgate.cli._common.text``; file names keep the locale's decoding.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli

from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.gate import Gate
from agentgate.keys import SigningKey, load_public_key, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

ESC_TEXT = "\x1b]0;pwned\x07\x1b[2J\u202eX"
"""What a hostile file would send a terminal: an OSC title, a bell, a screen clear, a bidi override."""


def one_error_line(err: str) -> str:
    """The single ``agentgate: error:`` line of ``err``; fails on anything else."""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentgate: error: "), err
    assert "Traceback" not in err
    return lines[0]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any locale or Python I/O setting, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LC_", "LANG", "PYTHONIO", "PYTHONUTF8", "AGENTGATE_"))
    }
    env.update(extra)
    return env


def run_cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentgate", *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        timeout=60,
    )


def assert_no_terminal_control(data: bytes) -> None:
    text = data.decode("utf-8")
    bad = [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]
    assert not bad, (bad, text)


# --- policy files -------------------------------------------------------------------------------------

BASE = "version: 1\nname: t\nroles:\n  r:\n    ttl_s: 60\n    bogus: 1\n"
"""Unknown field ``roles.r.bogus`` at line 6, column 5 whatever the line endings."""


@pytest.mark.parametrize(
    "data",
    [
        BASE.encode(),
        BASE.replace("\n", "\r\n").encode(),
        BASE.replace("\n", "\r").encode(),
        b"\xef\xbb\xbf" + BASE.encode(),
        b"\xef\xbb\xbf" + BASE.replace("\n", "\r\n").encode(),
        ("# 中文 😀 שלום e\u0301\n" + BASE).encode(),
    ],
    ids=["lf", "crlf", "cr", "bom", "bom-crlf", "non-ascii-comment"],
)
def test_policy_line_endings_and_bom_load_alike_and_locate_alike(data: bytes) -> None:
    good = data.replace(b"    bogus: 1", b"    description: ok")
    expected = parse_policy(BASE.replace("    bogus: 1\n", "    description: ok\n"), source="p.yaml")
    assert parse_policy(good, source="p.yaml").document == expected.document
    with pytest.raises(PolicyError) as caught:
        parse_policy(data, source="p.yaml")
    shift = 1 if data.startswith(b"#") else 0
    assert str(caught.value).startswith(f"p.yaml:{6 + shift}:5: unknown field roles.r.bogus")


POLICY_OK = "version: 1\nname: t\nroles:\n  r:\n    ttl_s: 60\n"


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (POLICY_OK.encode("utf-16"), "1:1"),
        (b"\xfe\xff" + POLICY_OK.encode("utf-16-be"), "1:1"),
        (POLICY_OK.encode("utf-32"), "1:1"),
        (POLICY_OK.encode().replace(b"name: t", b"name: t\xff"), "2:8"),
        (POLICY_OK.encode().replace(b"name: t", b"name: t\xed\xa0\x80"), "2:8"),
        (POLICY_OK.encode().replace(b"name: t", b"name: t\xc0\xaf"), "2:8"),
        (POLICY_OK.replace("\n", "\r\n").replace("name: t", "name: t\x00").encode(), "2:8"),
        (POLICY_OK.replace("name: t", "name: 'a\x9bb'").encode(), "2:9"),
        (POLICY_OK.replace("name: t", "name: " + ESC_TEXT).encode(), "2:7"),
        (POLICY_OK.replace("    ttl_s", "\tttl_s").encode(), "5:1"),
    ],
    ids=["utf16le", "utf16be", "utf32", "byte-ff", "cesu8", "overlong", "nul-crlf", "c1-csi", "esc", "tab"],
)
def test_policy_that_is_not_utf8_yaml_text_is_exit_2_with_file_and_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    data: bytes,
    where: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("p.yaml").write_bytes(data)
    for verb in (["policy", "lint", "p.yaml"], ["policy", "explain", "p.yaml", "--as", "x", "--tool", "t"]):
        code, out, err = cli(capsys, *verb)
        line = one_error_line(err)
        assert code == 2 and out == ""
        assert line.startswith(f"agentgate: error: p.yaml:{where}: "), line
        assert_no_terminal_control(err.encode())
    code, out, err = cli(capsys, "policy", "lint", "p.yaml", "--json")
    report = json.loads(out)
    assert code == 2 and err == "" and report["valid"] is False
    assert f"{report['error']['line']}:{report['error']['column']}" == where


def test_names_are_ascii_so_nfc_and_nfd_spellings_cannot_both_exist() -> None:
    did = SigningKey.generate().did
    for name in ("caf\u00e9", "cafe\u0301"):  # NFC, NFD
        principal = f'version: 1\nprincipals:\n  {name}: {{kind: agent, did: "{did}"}}\n'
        with pytest.raises(PolicyError) as caught:
            parse_policy(principal, source="p.yaml")
        assert str(caught.value).startswith("p.yaml:3:")
        tool = f"version: 1\ntools:\n  pay.{name}: {{}}\n"
        with pytest.raises(PolicyError) as caught:
            parse_policy(tool, source="p.yaml")
        assert str(caught.value).startswith("p.yaml:3:")


NFC = "Z\u00fcrich"
NFD = unicodedata.normalize("NFD", NFC)
CITY_POLICY = """\
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  alice: {{kind: agent, did: "{alice}", roles: [r]}}
tools:
  travel.book:
    idempotent: true
    args:
      city: {{type: string, required: true}}
    loggable: [city]
roles:
  r:
    kind: agent
    ttl_s: 600
    capabilities:
      - resource: tool:travel.book
        constraints:
          city: {{in: ["{nfc}", "東京", "שלום", "😀"]}}
"""


@pytest.fixture
def city(tmp_path: Path) -> Iterator[tuple[Path, dict[str, SigningKey]]]:
    keys = {n: SigningKey.generate() for n in ("root", "alice")}
    path = tmp_path / "city.yaml"
    path.write_text(CITY_POLICY.format(nfc=NFC, **{n: k.did for n, k in keys.items()}), encoding="utf-8")
    yield path, keys


def test_values_are_compared_exactly_never_normalized(
    city: tuple[Path, dict[str, SigningKey]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, keys = city
    explain = ["policy", "explain", str(path), "--as", "alice", "--tool", "travel.book", "--args"]
    code, out, _ = cli(capsys, *explain, json.dumps({"city": NFC}))
    assert code == 0 and out.startswith("ALLOW")
    code, out, _ = cli(capsys, *explain, json.dumps({"city": NFD}))
    assert code == 1 and out.startswith("DENY")
    gate = Gate(parse_policy(path.read_bytes(), source=str(path)), SQLiteStore(path.parent / "g.db"))
    try:
        agent = gate.issue(keys["root"], name="alice", key=keys["alice"], role="r")
        assert gate.authorize(agent, Call.tool("travel.book", {"city": NFC}), call_id="1").allowed
        assert not gate.authorize(agent, Call.tool("travel.book", {"city": NFD}), call_id="2").allowed
    finally:
        gate.close()


def test_non_ascii_output_is_utf8_under_c_and_ascii_locales(
    city: tuple[Path, dict[str, SigningKey]],
) -> None:
    """Standard output is UTF-8 whatever the locale says, and nothing crashes encoding it. The Gate
    writes entries with CJK, RTL, emoji and an ESC/bidi-laden argument; ``audit show`` escapes the
    latter. The arguments are ASCII, so the locale's reading of argv plays no part here."""
    path, keys = city
    db = path.parent / "g.db"
    gate = Gate(parse_policy(path.read_bytes(), source=str(path)), SQLiteStore(db))
    try:
        agent = gate.issue(keys["root"], name="alice", key=keys["alice"], role="r")
        for i, value in enumerate(("東京", "שלום", NFD, ESC_TEXT)):
            gate.authorize(agent, Call.tool("travel.book", {"city": value}), call_id=str(i))
    finally:
        gate.close()
    for env in (
        {"LC_ALL": "C"},
        {"LC_ALL": "C", "PYTHONUTF8": "0"},
        {"LANG": "C", "PYTHONIOENCODING": "ascii:strict"},
    ):
        explain = ["policy", "explain", path.name, "--as", "alice", "--tool", "travel.book"]
        proc = run_cli([*explain, "--args", '{"city": "Paris"}'], path.parent, **env)
        assert proc.returncode == 1 and proc.stderr == b"", (env, proc.stderr)
        assert f'city in ["{NFC}", "東京", "שלום", "😀"]' in proc.stdout.decode("utf-8")
        proc = run_cli(["audit", "show"], path.parent, AGENTGATE_STORE=str(db), **env)
        assert proc.returncode == 0 and proc.stderr == b"", (env, proc.stderr)
        assert "שלום" in proc.stdout.decode("utf-8") and "\\x1b" in proc.stdout.decode("utf-8")
        assert_no_terminal_control(proc.stdout)


# --- text arguments and the locale ---------------------------------------------------------------------


def _latin1_locale(tmp_path: Path) -> dict[str, str]:
    localedef = shutil.which("localedef")
    if localedef is None:
        pytest.skip("no localedef to build a Latin-1 locale")
    root = tmp_path / "locales"
    root.mkdir()
    made = subprocess.run(
        [localedef, "-i", "en_US", "-f", "ISO-8859-1", str(root / "en_US.ISO-8859-1")],
        capture_output=True,
        timeout=60,
    )
    if not (root / "en_US.ISO-8859-1").exists():
        pytest.skip(f"cannot build a Latin-1 locale: {made.stderr[-200:]!r}")
    return {"LOCPATH": str(root), "LC_ALL": "en_US.ISO-8859-1"}


@pytest.mark.parametrize("locale", ["ascii", "latin-1"])
def test_text_arguments_are_read_as_utf8_whatever_the_locale(
    city: tuple[Path, dict[str, SigningKey]], tmp_path: Path, locale: str
) -> None:
    path, _ = city
    env = {"LC_ALL": "C", "PYTHONUTF8": "0"} if locale == "ascii" else _latin1_locale(tmp_path)
    args = ["policy", "explain", path.name, "--as", "alice", "--tool", "travel.book", "--args"]
    proc = run_cli([*args, json.dumps({"city": NFC}, ensure_ascii=False)], path.parent, **env)
    # Under a UTF-8 locale (test_values_are_compared_exactly_never_normalized) this call is allowed.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(b"ALLOW")


# --- key, token and payload files --------------------------------------------------------------------


@pytest.fixture
def keydir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    for name in ("root", "alice", "bob"):
        save_key(SigningKey.generate(), tmp_path / "k", name)
    return tmp_path


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def test_key_and_token_file_line_endings_and_encodings(
    keydir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = (keydir / "k" / "root.key").read_bytes()
    issue = ["grant", "issue", "--to", "k/alice.pub", "--allow", "tool:pay", "--ttl", "1h"]
    for label, data in (
        ("crlf", key.replace(b"\n", b"\r\n")),
        ("cr", key.replace(b"\n", b"\r")),
        ("bom", b"\xef\xbb\xbf" + key),
    ):
        code, _, err = cli(
            capsys, *issue, "--issuer", _write(keydir / f"{label}.key", data), "--out", "a.tok", "--force"
        )  # --force: each replaces the last (a file that is not empty is refused without it, review R71)
        assert code == 0, (label, err)
    token = (keydir / "a.tok").read_bytes()
    code, out, _ = cli(capsys, "grant", "inspect", _write(keydir / "crlf.tok", token.replace(b"\n", b"\r\n")))
    assert code == 0 and out.startswith("chain of 1 link(s)")
    for label, data in (
        ("bom", b"\xef\xbb\xbf" + token),
        ("utf16", token.decode().encode("utf-16")),
        ("nul", token.strip() + b"\x00\n"),
    ):
        name = _write(keydir / f"{label}.tok", data)
        code, out, err = cli(capsys, "grant", "inspect", name)
        assert code == 2 and out == "" and one_error_line(err).startswith(f"agentgate: error: {name}: ")


def test_pub_file_with_a_malformed_did_is_named_in_the_error(
    keydir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = (keydir / "k" / "bob.pub").read_text()
    for label, text in (
        ("typo", good.replace("z6Mk", "z6Mm")),
        ("short", "did:key:zzz\n"),
        ("nul", good.strip() + "\x00\n"),
    ):
        name = _write(keydir / f"{label}.pub", text.encode())
        code, _, err = cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", name,
                           "--allow", "tool:pay", "--ttl", "1h")  # fmt: skip
        assert code == 2 and name in one_error_line(err), err


def test_pub_file_with_a_bom_reads_as_a_pem_one_does(keydir: Path) -> None:
    did = (keydir / "k" / "bob.pub").read_text().strip()
    pem = keydir / "pem.pub"
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = load_public_key(did).raw
    pem_bytes = Ed25519PublicKey.from_public_bytes(raw).public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pem.write_bytes(b"\xef\xbb\xbf" + pem_bytes)
    assert load_public_key(pem).did == did  # holds: the PEM reader skips the BOM
    bom = keydir / "bom.pub"
    bom.write_bytes(b"\xef\xbb\xbf" + did.encode() + b"\r\n")
    assert load_public_key(bom).did == did


def test_hostile_token_error_line_holds(keydir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A token that fails to parse for a reason quoting no hostile text: one escaped line."""
    name = _write(keydir / "h.tok", _hostile_token(keydir, "tool:x", ok_constraint=False))
    code, _, err = cli(capsys, "grant", "inspect", name)
    assert code == 2 and "unknown operator 'bogus'" in one_error_line(err)


def _hostile_token(keydir: Path, resource: str, *, ok_constraint: bool = True) -> bytes:
    """A token (unsigned: parsing comes first) whose one capability names ``resource`` and, unless
    ``ok_constraint``, constrains an argument with an unknown operator."""
    import base64

    import orjson

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    did = (keydir / "k" / "alice.pub").read_text().strip()
    constraint = {"le": 5} if ok_constraint else {"bogus": 1}
    body = {"v": 1, "iss": did, "aud": did, "budget": None, "nbf": 0, "exp": 2**39, "depth": 1,
            "caps": [{"resource": resource, "action": "invoke", "constraints": {"a": constraint}}],
            "nonce": "00" * 16, "purpose": "", "parent": None}  # fmt: skip
    payload = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    return f"ag1.{b64(payload)}.{b64(bytes(64))}\n".encode()


@pytest.mark.parametrize("verb", ["inspect", "check", "revoke"])
def test_hostile_token_sends_no_escape_sequence_in_the_error_line(
    keydir: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    name = _write(keydir / "h.tok", _hostile_token(keydir, "tool:" + ESC_TEXT, ok_constraint=False))
    extra = {
        "inspect": [],
        "check": ["--as", "k/alice.key", "--trust", "k/root.pub", "--tool", "x"],
        "revoke": [],
    }[verb]
    code, _, err = cli(capsys, "grant", verb, name, *extra)
    assert code == 2
    one_error_line(err)
    assert_no_terminal_control(err.encode())


@pytest.mark.usefixtures("no_default_store")
def test_approval_payload_encodings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    save_key(keys["lead"], tmp_path / "k", "lead")
    policy = f"""\
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{keys["agent"].did}", roles: [worker]}}
  lead: {{kind: human, did: "{keys["lead"].did}", roles: [worker]}}
tools:
  travel.book:
    args: {{city: {{type: string, required: true}}}}
    loggable: [city]
roles:
  worker:
    ttl_s: 600
    capabilities:
      - resource: tool:travel.book
approvals:
  trips:
    resource: tool:travel.book
    approvers: [lead]
    expiry_s: 300
"""
    gate = Gate(parse_policy(policy, source="a.yaml"), SQLiteStore(tmp_path / "g.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("travel.book", {"city": "東京 " + ESC_TEXT}), call_id="c1")
        payload = json.dumps(auth.approval_payload(), indent=2, ensure_ascii=False)
    finally:
        gate.close()
    lead = str(tmp_path / "k" / "lead.key")
    crlf = tmp_path / "crlf.json"
    crlf.write_bytes(payload.replace("\n", "\r\n").encode("utf-8"))
    code, out, err = cli(capsys, "approval", "sign", str(crlf), "--as", lead)
    assert code == 0 and json.loads(out)["approver"] == keys["lead"].did
    assert "東京" in err or "\\u6771\\u4eac" in err  # the arguments as JSON: shown, escaped or not
    assert_no_terminal_control(err.encode())
    for label, data in (("bom", b"\xef\xbb\xbf" + payload.encode()), ("utf16", payload.encode("utf-16"))):
        bad = tmp_path / f"{label}.json"
        bad.write_bytes(data)
        code, out, err = cli(capsys, "approval", "sign", str(bad), "--as", lead)
        assert code == 2 and out == "" and one_error_line(err).startswith(f"agentgate: error: {bad}: ")


# --- paths -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dirname", [b"with space", "é 中 😀 שלום".encode(), b"bad\xff\xfe"])
def test_store_key_and_output_paths_of_any_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dirname: bytes
) -> None:
    monkeypatch.chdir(tmp_path)
    # A real process's stderr escapes what UTF-8 cannot carry (``\\udcff``); capsys's is strict.
    assert isinstance(sys.stderr, io.TextIOWrapper)
    sys.stderr.reconfigure(errors="backslashreplace")
    where = tmp_path / os.fsdecode(dirname)
    monkeypatch.setenv("AGENTGATE_STORE", str(where / "store.db"))
    for name in ("root", "alice"):
        code, _, err = cli(capsys, "keys", "new", name, "--dir", str(where / "k"))
        assert code == 0, err
    out_file = str(where / "tok en.tok")
    code, _, err = cli(capsys, "grant", "issue", "--issuer", str(where / "k" / "root.key"),
                       "--to", str(where / "k" / "alice.pub"), "--allow", "tool:pay", "--ttl", "1h",
                       "--out", out_file)  # fmt: skip
    assert code == 0, err
    code, _, err = cli(capsys, "grant", "revoke", out_file, "--reason", "fraude présumée 東京")
    assert code == 0, err
    code, out, err = cli(capsys, "audit", "show")
    assert code == 0 and "fraude présumée 東京" in out, err


def test_error_naming_an_undecodable_path_is_one_escaped_line(tmp_path: Path) -> None:
    missing = os.fsdecode(bytes(tmp_path) + b"/bad\xff/store.db")
    for env in ({"LC_ALL": "C"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}):
        proc = run_cli(["audit", "show"], tmp_path, AGENTGATE_STORE=missing, **env)
        assert proc.returncode == 2 and proc.stdout == b""
        line = one_error_line(proc.stderr.decode("utf-8"))
        assert "no store at" in line and "\\udcff" in line, line


def test_lint_summary_escapes_a_hostile_file_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = "ev\x1b[2Jil\u202e.yaml"
    Path(name).write_text("version: 1\nprincipals:\n  alice: {kind: human}\n")  # principal_without_key
    code, out, err = cli(capsys, "policy", "lint", name)
    assert code == 1 and err == ""
    assert "\\x1b[2Jil\\u202e.yaml:" in out  # the findings: escaped (holds)
    assert_no_terminal_control(out.encode())


# --- environment values from a CRLF env file ---------------------------------------------------------


def test_store_path_with_a_trailing_line_break_is_shown_escaped(
    keydir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENTGATE_STORE=/x/s.db\\r`` (an env file saved with CRLF): a reading command said ``no store
    at /x/s.db``, a file that exists, as the line break vanished into the one error line. Fixed in
    agentgate/cli/_common.py: the path is printed escaped, and the stray end named."""
    db = keydir / "s.db"
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", "tool:pay",
               "--ttl", "1h", "--out", "a.tok")[0] == 0  # fmt: skip
    for value in (f"{db}\r", f"{db} ", f"sqlite:///{db}\n"):
        monkeypatch.setenv("AGENTGATE_STORE", value)
        code, out, err = cli(capsys, "audit", "show")
        line = one_error_line(err)
        assert code == 2 and out == ""
        assert "white space or a line break at an end" in line, line
        if "\r" in value:
            assert f"no store at {db}\\r " in line, line


def test_revocation_never_goes_to_a_store_named_with_a_stray_line_break(
    keydir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = keydir / "s.db"
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", "tool:pay",
               "--ttl", "1h", "--out", "a.tok")[0] == 0  # fmt: skip
    monkeypatch.setenv("AGENTGATE_STORE", f"{db}\r")
    code, out, err = cli(capsys, "grant", "revoke", "a.tok", "--reason", "compromised")
    assert not Path(f"{db}\r").exists(), "the revocation went to a new store the Gate never reads"
    assert code == 2 and out == "" and one_error_line(err)
