"""Review R66: ``audit report`` wrote an entry's text into the page as it was (HTML-escaped only):
control characters, bidi overrides and line separators reached the page (agentgate/audit/report.py)."""

from __future__ import annotations

from agentgate._shown import not_printable
from agentgate.audit.entry import AuditEntry
from agentgate.audit.report import render_report

HOSTILE = "a\x1b[31m\u202eb\u2066\u2028\r\x00\x7f\x9b\ufeff\u200f\\c<"
TIME = "2026-12-04T00:00:00.000000Z"


def test_a_report_shows_hostile_entry_text_escaped_as_the_cli_does() -> None:
    """Review R66: a principal, resource, reason, status, tip and charged unit holding an escape
    sequence, a bidi override (U+202E), a line separator, NUL and a byte order mark went into the
    page raw: the override reordered the cell it stood in, and ``cat report.html`` sent the escape
    sequence to the terminal. Rule: the page holds no ``not_printable`` character but its line
    break; each is written as its escape (``\\x1b``, ``\\u202e``), a backslash doubled, as the
    CLI's ``show`` writes the same text, and HTML is escaped after that."""
    entries = [
        AuditEntry(
            index=0,
            time=TIME,
            kind="allow",
            principal="did:key:z" + HOSTILE,
            resource="tool:" + HOSTILE,
            chain_hash=HOSTILE,
            reasons=(HOSTILE,),
            budget_delta=3,
        ),
        AuditEntry(
            index=1,
            time=TIME,
            kind="outcome",
            principal="did:key:z" + HOSTILE,
            resource="tool:" + HOSTILE,
            chain_hash=HOSTILE,
            ref=0,
            status=HOSTILE,
            budget_delta=3,
            charges={HOSTILE: {HOSTILE: 3}},
        ),
    ]
    page = render_report(iter(entries), None, [HOSTILE])
    assert [hex(ord(c)) for c in page if not_printable(c) and c != "\n"] == []
    shown = "a\\x1b[31m\\u202eb\\u2066\\u2028\\r\\x00\\x7f\\x9b\\ufeff\\u200f\\\\c&lt;"
    assert f"<code>did:key:z{shown}</code>" in page


def test_what_verification_quoted_escaped_is_not_escaped_again() -> None:
    """Review R66: verification quotes an entry's text escaped already (``'a\\x1b'``): the page
    shows it as the CLI's ``audit verify`` does, its backslashes not doubled, and any character
    it left raw escaped."""
    page = render_report(iter(()), None, ["entry 3: kind 'a\\x1b' \u202e"])
    assert "<li>entry 3: kind &#x27;a\\x1b&#x27; \\u202e</li>" in page
