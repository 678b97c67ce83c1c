"""A refusal of ``approval sign`` against the default store names it, and --store (review R92)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import Asked


def test_a_refusal_against_the_default_store_names_it_and_says_to_give_store(
    no_default_store: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R92's second reading: signed in a folder holding another project's store, a
    legitimate payload was refused as "the store has no approval request of this id", naming no
    store, though the approver gave none and was not told that .agentgate/agentgate.db of the
    working directory was read, nor that --store names the Gate's."""
    (no_default_store / ".agentgate").mkdir()
    Asked(no_default_store / ".agentgate").gate.close()  # another project's store, by default
    elsewhere = Asked(tmp_path_factory.mktemp("gate"))
    elsewhere.gate.close()
    payload = elsewhere.write()
    code, out, err = cli(capsys, "approval", "sign", payload, "--as", elsewhere.lead)
    assert (code, out) == (1, ""), err
    assert "no approval request of this id" in err
    assert "the default store .agentgate/agentgate.db of the working directory" in err
    assert "give --store, the Gate's store" in err
    # Given by name, the store is the approver's own word: the refusal is as before.
    code, _, err = cli(
        capsys, "approval", "sign", payload, "--as", elsewhere.lead, "--store", ".agentgate/agentgate.db"
    )
    assert code == 1 and "no approval request of this id" in err
    assert "default store" not in err
