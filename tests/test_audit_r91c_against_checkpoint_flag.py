"""``referring`` and ``entry`` take ``against_checkpoint`` as a bool, and refuse anything else.

Until review R91c the flag was read by truth: ``referring(i, against_checkpoint=None)`` or ``0``
turned the check against the latest signed checkpoint off without a word, and a log whose newest
rows were deleted read as healthy. It is now ``InputError`` naming the flag, before anything is
read.
"""

from __future__ import annotations

import pytest
from test_audit_tamper import KEY, ORIGIN

from agentgate.errors import InputError
from agentgate.store import Store
from agentgate.store.audit import AuditLog

CALL = {"principal": "did:key:zAlice", "resource": "gpu:h100"}


@pytest.mark.parametrize(("flag", "shown"), [(None, "None"), (0, "0"), ("no", "'no'")])
def test_a_flag_that_is_not_a_bool_is_refused(store: Store, flag: object, shown: str) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    allow = log.append({"kind": "allow", **CALL})
    log.append({"kind": "outcome", "ref": allow, "status": "ok", **CALL})
    message = f"audit log: against_checkpoint must be True or False, got {shown}"
    with pytest.raises(InputError) as refused:
        log.referring(allow, against_checkpoint=flag)  # type: ignore[arg-type]
    assert str(refused.value) == message
    with pytest.raises(InputError) as refused:
        log.entry(allow, against_checkpoint=flag)  # type: ignore[arg-type]
    assert str(refused.value) == message
    assert [e.index for e in log.referring(allow, against_checkpoint=False)] == [allow + 1]
    assert log.entry(allow, against_checkpoint=True).index == allow
