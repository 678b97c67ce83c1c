"""Review R84: the keys API answers a value of the wrong type with its typed error, or the answer
its protocol has, never a bare ``TypeError`` or ``UnicodeEncodeError``; and ``keys new`` offers
only a command it takes, quoted for the shell."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import InputError, KeyFileError
from agentgate.keys import Keyring, SigningKey, save_key

KEY = SigningKey(bytes(range(32)))


@pytest.mark.parametrize("name", [5, None, b"agent"], ids=["int", "None", "bytes"])
def test_save_key_refuses_a_name_that_is_not_text(tmp_path: Path, name: object) -> None:
    with pytest.raises(KeyFileError, match=f"invalid key name: expected text, got {type(name).__name__}"):
        save_key(KEY, tmp_path, name)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_save_key_refuses_a_name_no_file_name_can_hold(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"invalid key name '\\ud800': use a plain file name"):
        save_key(KEY, tmp_path, "\ud800")
    with pytest.raises(KeyFileError, match="the path holds a character no file name can hold"):
        save_key(KEY, tmp_path / "\ud800", "agent")
    assert list(tmp_path.iterdir()) == []


def test_save_key_takes_a_directory_given_as_text(tmp_path: Path) -> None:
    assert save_key(KEY, str(tmp_path / "keys"), "agent") == (
        tmp_path / "keys" / "agent.key",
        tmp_path / "keys" / "agent.pub",
    )


@pytest.mark.parametrize("directory", [None, 5])
def test_save_key_refuses_a_directory_that_is_no_path(directory: object) -> None:
    with pytest.raises(
        KeyFileError, match="cannot write a key pair into its directory: expected a file path"
    ):
        save_key(KEY, directory, "agent")  # type: ignore[arg-type]


def test_in_a_keyring_is_false_for_what_is_no_did() -> None:
    ring = Keyring([KEY.public])
    assert KEY.did in ring
    assert [1] not in ring and {} not in ring and None not in ring and KEY.did.encode() not in ring


@pytest.mark.parametrize("message", [bytearray(b"m"), memoryview(b"m")], ids=["bytearray", "memoryview"])
def test_verify_refuses_a_message_that_is_not_bytes_as_sign_does(message: object) -> None:
    with pytest.raises(InputError, match=f"must be bytes, got {type(message).__name__}"):
        KEY.sign(message)  # type: ignore[arg-type]
    with pytest.raises(InputError, match=f"must be bytes, got {type(message).__name__}"):
        KEY.public.verify(message, KEY.sign(b"m"))  # type: ignore[arg-type]
    KEY.public.verify(b"m", KEY.sign(b"m"))


@pytest.mark.parametrize("name", [".key.key", ".pub.key", "a/b.key"])
def test_keys_new_offers_no_command_it_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert main(["keys", "new", name, "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "agentgate keys new" not in err and "use a plain file name" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stem", ["a b", "$HOME", "it's"])
def test_keys_new_offers_the_name_quoted_for_the_shell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stem: str
) -> None:
    assert main(["keys", "new", f"{stem}.key", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    offered = err.split("agentgate keys new ", 1)[1].split(" writes ", 1)[0]
    assert shlex.split(offered) == [stem], err
    assert main(["keys", "new", *shlex.split(offered), "--dir", str(tmp_path)]) == 0
    assert (tmp_path / f"{stem}.key").is_file()
