"""The spans of ``Gate.revoke`` and ``Gate.revoke_holder`` given input that names no grant or no
key: refused before anything is written, as a ``by`` that is not text is, and with no span (a
span links the entry of an act of authority; a refused input wrote none)."""

from __future__ import annotations

import pytest
from test_authority_findings_documented import Desk, desk  # noqa: F401 (the fixture)

from agentgate.errors import InputError, KeyFileError, TokenFormatError


def _revocation_spans(at: Desk) -> list[str]:
    return [s.name for s in at.spans.get_finished_spans() if s.name.startswith("revoke ")]


@pytest.mark.parametrize("grant", ["not a token", "ab" * 31, 42])
def test_revoking_what_is_no_grant_is_refused_with_no_span_and_nothing_written(
    desk: Desk,  # noqa: F811 (the fixture)
    grant: object,
) -> None:
    """Review R57: Gate.revoke given something that is not a token left an ERROR span linking no audit entry."""
    size = desk.gate.audit.size()
    with pytest.raises(TokenFormatError):
        desk.gate.revoke(grant, by="ops")  # type: ignore[arg-type]
    assert _revocation_spans(desk) == []
    assert desk.gate.audit.size() == size


@pytest.mark.parametrize(("holder", "error"), [("did:key:zNotAKey", KeyFileError), (42, InputError)])
def test_revoking_the_grants_of_what_is_no_key_is_refused_with_no_span(
    desk: Desk,  # noqa: F811 (the fixture)
    holder: object,
    error: type[Exception],
) -> None:
    """Review R57: Gate.revoke_holder given a holder that is no did:key left an ERROR revoke holder span."""
    size = desk.gate.audit.size()
    with pytest.raises(error):
        desk.gate.revoke_holder(holder, by="ops")  # type: ignore[arg-type]
    assert _revocation_spans(desk) == []
    assert desk.gate.audit.size() == size


def test_a_revocation_still_has_its_span(desk: Desk) -> None:  # noqa: F811 (the fixture)
    desk.gate.revoke(desk.agent, by="ops")
    assert _revocation_spans(desk) == ["revoke grant"]
