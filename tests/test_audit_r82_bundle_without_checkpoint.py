"""Review R82: a proof bundle cut off at the blank line after its proof (its checkpoint missing)
was refused as ``proof bundle line 8 is blank: one blank line, line 7, ends the proof``, naming a
line the file does not have and not what is wrong. Now it says the bundle has no checkpoint and
names the blank line it ends at (``audit verify-proof``: exit 2, as before).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_r66_checkpoint_lines import world  # noqa: F401  (the fixture: a log, its key, a bundle)

from agentgate.audit.proof import ProofBundle
from agentgate.cli.main import main
from agentgate.errors import TamperDetected


def test_a_bundle_that_ends_at_its_blank_line_has_no_checkpoint(
    world: tuple[Path, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    tmp_path, _, bundle = world
    head = bundle.partition("\n\n")[0]
    assert len(head.split("\n")) == 5  # header, extra, index, two hashes: the blank line is line 6
    said = "proof bundle has no checkpoint: it ends at the blank line after its proof, line 6"
    with pytest.raises(TamperDetected) as refused:
        ProofBundle.parse(head + "\n\n")
    assert str(refused.value) == said
    (tmp_path / "p").write_text(head + "\n\n")
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    assert capsys.readouterr() == ("", f"agentgate: error: p: not a well-formed proof bundle: {said}\n")
