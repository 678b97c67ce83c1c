"""An empty saved checkpoint given to ``verify`` is one that does not open, not none given.

Until review R90 ``AuditLog.verify(saved_checkpoint="")`` tested the text for truth, left the empty
one out and said ``ok``: a program that read a saved checkpoint file that was since truncated was
told the log is intact, while ``checkpoint(saved="")`` and ``prove(i, "")`` refused the same text
as a checkpoint that does not open (``verify("\\n")`` reported it too). Now it is a problem named
``saved checkpoint``, as for any other text that is not this log's signed note.
"""

from __future__ import annotations

import pytest
from test_audit_tamper import _fill

from agentgate.store import Store

SAID = "saved checkpoint: checkpoint is for log '', expected 'test.example/audit'"


@pytest.mark.parametrize("saved", ["", "\n"], ids=["empty", "one-line-break"])
def test_an_empty_saved_checkpoint_is_a_problem(store: Store, saved: str) -> None:
    log = _fill(store, 3)
    log.checkpoint()
    report = log.verify(saved_checkpoint=saved)
    assert not report.ok and report.problems == (SAID,)


def test_no_saved_checkpoint_is_still_none_given(store: Store) -> None:
    log = _fill(store, 3)
    log.checkpoint()
    assert log.verify().ok and log.verify(saved_checkpoint=None).ok
