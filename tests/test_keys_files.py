"""Key files (agentgate/keys.py): a private key is read only from a private regular file of
bounded size, a public key only when it is Ed25519, and ``save_key`` writes visible names and
cleans up after an interrupted run without removing a committed key. ``replace_file`` sets the
mode asked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import x25519
from test_authority_grants import ALICE_KEY

from agentgate._yaml import read_source
from agentgate.errors import InputError, KeyFileError, PolicyError
from agentgate.keys import (
    MAX_KEY_FILE_BYTES,
    SigningKey,
    load_public_key,
    load_signing_key,
    read_regular_file,
    save_key,
)

SEED = bytes(range(32))
KEY = SigningKey(SEED)


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


def test_a_private_key_file_readable_by_its_group_is_refused(tmp_path: Path) -> None:
    """Mutant: the key-file mode check looks at the others' bits only. Rule: a private key file
    that group or others may read or write (0640, 0660, 0604) is refused."""
    key_path, _ = save_key(ALICE_KEY, tmp_path, "alice")
    assert load_signing_key(key_path).did == ALICE_KEY.did
    for mode in (0o640, 0o620, 0o610):
        os.chmod(key_path, mode)
        with pytest.raises(KeyFileError, match="accessible by others"):
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


HOSTILE_NAMES = ["a\nagentgate: error: forged line", "esc\x1b[2Jname", "rtl\u202egpj.pub", "bad\udcffbyte"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_file_name_reaches_a_key_error_escaped_on_one_line(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: read_regular_file put the path raw in its error: a file name holding a line
    break or an escape sequence reached a log line as it is. Rule: each character that is not
    printable is its backslash escape in the library's message, one line; the CLI shows that
    escape once (not escaped again), and a policy error names the file once, escaped the same way."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)
    missing = tmp_path / name
    (tmp_path / f"{name}.d").mkdir()
    for path, why in ((missing, "No such file"), (tmp_path / f"{name}.d", "not a regular file")):
        with pytest.raises(KeyFileError) as caught:
            read_regular_file(path, MAX_KEY_FILE_BYTES, "public key", KeyFileError)
        message = str(caught.value)
        assert message.isprintable() and message.startswith(f"{tmp_path}/{shown}") and why in message
    with pytest.raises(PolicyError) as policy:
        read_source(str(missing), PolicyError, limit=100, what="policy")
    said = str(policy.value)  # the file named once, escaped as the key error names it (review R55)
    assert said.count(shown) == 1 and said.isprintable() and "No such file" in said

    from agentgate.cli.main import main

    assert main(["grant", "inspect", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"agentgate: error: {tmp_path}/{shown}: cannot read token: No such file or directory\n"


def test_a_policy_error_quoting_an_escaped_key_path_is_escaped_once_on_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: the CLI escaped a policy or inventory error again as a whole (backslashes
    included), so a key path the library had already quoted escaped showed each escape twice
    (``x\\\\x1b[2J.pub``). Rule: the CLI's line escapes what is still unprintable, once."""
    from agentgate.cli.main import main

    policy = tmp_path / "p.yaml"
    policy.write_text('version: 1\nprincipals:\n  p:\n    kind: agent\n    key: "x\\e[2J.pub"\n')
    assert main(["policy", "explain", str(policy), "--as", "p", "--tool", "t"]) == 2
    err = capsys.readouterr().err
    looked = str(tmp_path / "x\x1b[2J.pub")
    assert f"(looked at {looked!r})" in err and "\\\\x1b" not in err
    assert err.count("\n") == 1 and err[:-1].isprintable()
