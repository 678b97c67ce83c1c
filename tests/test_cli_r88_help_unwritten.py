"""``--help`` whose text cannot be written ends as a verb's unwritten output does (review R88):
exit 2 and one ``cannot write the output`` line for a full disk or a closed standard output, 141
for a reader gone. Before, argparse's exit left the command before its checks of the output (and
argparse drops an error writing the help): the help was lost, exit 0."""

from __future__ import annotations

import errno
import io

import pytest

from agentgate.cli.main import main


class _Unwritable(io.StringIO):
    """A standard output that fails with ``error``: on ``write``, or (``on_write`` false) on ``flush`` of what it holds."""

    def __init__(self, error: OSError, *, on_write: bool) -> None:
        super().__init__()
        self.error, self.on_write = error, on_write

    def write(self, text: str) -> int:
        if self.on_write:
            raise self.error
        return super().write(text)

    def flush(self) -> None:
        if self.getvalue():
            raise self.error


def _help_into(stdout: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdout", stdout)
    try:
        return main(["grant", "check", "--help"])
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.parametrize("on_write", [True, False], ids=["on-write", "on-flush"])
def test_help_on_a_full_disk_is_exit_2_with_one_line(
    on_write: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = _Unwritable(OSError(errno.ENOSPC, "No space left on device"), on_write=on_write)
    assert _help_into(full, monkeypatch) == 2
    assert capsys.readouterr().err == "agentgate: error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("on_write", [True, False], ids=["on-write", "on-flush"])
def test_help_whose_reader_is_gone_is_exit_141(
    on_write: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = _Unwritable(BrokenPipeError(errno.EPIPE, "Broken pipe"), on_write=on_write)
    assert _help_into(gone, monkeypatch) == 141
    assert capsys.readouterr().err == ""


def test_help_written_still_ends_as_argparse_ends_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["grant", "check", "--help"])
    assert ended.value.code == 0
    assert capsys.readouterr().out.startswith("usage: agentgate grant check")
