"""``agentgate approval sign`` checks the payload against the default store, as every other verb
opens it, and says so where no store was checked (review R92)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import Asked


@pytest.fixture
def asked_in_default(no_default_store: Path) -> Iterator[Asked]:
    """A Gate whose store is the default one of the working directory, .agentgate/agentgate.db."""
    (no_default_store / ".agentgate").mkdir()
    made = Asked(no_default_store / ".agentgate")
    yield made
    made.gate.close()


def test_an_edited_payload_is_refused_against_the_default_store(
    asked_in_default: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R92: with neither --store nor AGENTGATE_STORE the default store was never read, and
    reasons edited on the way were signed as shown, exit 0, without a word."""
    edited = asked_in_default.write(lambda r: r.update(reasons=["routine refund, no risk"]))
    code, out, err = cli(capsys, "approval", "sign", edited, "--as", asked_in_default.lead)
    assert (code, out) == (1, ""), err
    assert err.startswith("agentgate: refused: ") and "'reasons'" in err


def test_an_untouched_payload_is_checked_against_the_default_store(
    asked_in_default: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "approval", "sign", asked_in_default.write(), "--as", asked_in_default.lead)
    assert code == 0, err
    assert "checked    against the store's request" in err


def test_with_no_store_anywhere_the_description_says_nothing_was_checked(
    no_default_store: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R92: signed with no store to check against, the description now says so, and how to
    check (--store); the approval is written all the same, exit 0."""
    elsewhere = Asked(tmp_path_factory.mktemp("gate"))
    try:
        code, out, err = cli(capsys, "approval", "sign", elsewhere.write(), "--as", elsewhere.lead)
    finally:
        elsewhere.gate.close()
    assert code == 0 and out, err
    line = next(each for each in err.splitlines() if each.lstrip().startswith("checked"))
    assert "against no store" in line and "--store" in line
    assert not (no_default_store / ".agentgate").exists()
