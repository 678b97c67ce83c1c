"""Review R86: ``utc_text`` wrote years 1 to 999 without padding (glibc's ``strftime("%Y")``),
``1-01-01T00:00:00Z``, no RFC 3339 time (docs/cli.md, Output conventions); the year is now
always four digits, and the text reads back as the same time."""

from datetime import UTC, datetime

from agentgate._time import utc_text, when


def test_years_before_1000_are_written_in_four_digits_and_read_back() -> None:
    cases = {
        -62135596800: "0001-01-01T00:00:00Z",
        -30610224001: "0999-12-31T23:59:59Z",
        -59000000000: "0100-05-13T15:06:40Z",
        1795969091: "2026-11-29T16:18:11Z",
        253402300799: "9999-12-31T23:59:59Z",
    }
    for seconds, text in cases.items():
        assert utc_text(seconds) == text and when(seconds) == text
        assert datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() == seconds
    assert utc_text(253402300800) is None
