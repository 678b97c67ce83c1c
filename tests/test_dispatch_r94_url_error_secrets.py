"""Review R94: the inventory refuses a ``url`` or ``metrics_url`` carrying credentials or a query
string, as they would be logged; but one that also had another fault (a scheme other than http,
white space, a character a host cannot hold under NFKC) was refused with the URL quoted whole,
password or ``?token=`` included. Such an error now shows ``...@`` and ``?...`` in their place,
and still says what is wrong and where."""

from __future__ import annotations

import pytest

from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError


@pytest.mark.parametrize(
    ("field", "url", "said"),
    [
        ("url", "ftp://admin:SECRETPW@host:8000", r"'ftp://\.\.\.@host:8000' must be an http://"),
        ("url", "http://admin:SECRETPW@host:8000/ x", r"'http://\.\.\.@host:8000/ x' must be an http://"),
        ("url", "http://admin:SECRET\u2100PW@host:80", "carries credentials"),
        ("url", "http://admin:SEC/RETPW@host:80", "not a usable URL: its host or port cannot be read"),
        (
            "metrics_url",
            "tcp://h:1/metrics?token=SECRETKEY",
            r"'tcp://h:1/metrics\?\.\.\.' must be an http://",
        ),
        ("metrics_url", "http://h:1/m#SECRET@h", "query string or fragment"),
        # A password holding ? or #: its userinfo is hidden before the query is cut (until review
        # R94 the cut took the @ with it, and the user and password up to the ? were quoted).
        ("url", "ftp://admin:SECRETPW?x@host:8000", r"'ftp://\.\.\.@host:8000' must be an http://"),
        ("url", "ftp://admin:SECRET#PW@host:8000", r"'ftp://\.\.\.@host:8000' must be an http://"),
        ("url", "http://admin:SECRET?PW@host x", r"'http://\.\.\.@host x' must be an http://"),
        (
            "metrics_url",
            "tcp://adm:SECRET/?PW@h:1/m?token=x",
            r"'tcp://\.\.\.@h:1/m\?\.\.\.' must be an http://",
        ),
        # A "://" further on is no scheme's end (a regression review of R94: all before it was
        # quoted as the scheme, password and token included).
        ("url", "admin:SECRETPW@gpu1:8000/v1?next=http://x", r"'\.\.\.@gpu1:8000/v1\?\.\.\.' must be"),
        ("url", "http:/admin:SECRETPW@gpu1:8000/#http://x", r"'\.\.\.@gpu1:8000/#\.\.\.' must be"),
        ("metrics_url", "h:1/metrics?token=SECRETKEY&next=http://x", r"'h:1/metrics\?\.\.\.' must be"),
    ],
)
def test_a_url_error_never_quotes_its_credentials_or_query(field: str, url: str, said: str) -> None:
    fields = f'url: "{url}"' if field == "url" else f'url: "http://h:1", {field}: "{url}"'
    text = f"backends:\n  - {{name: b, {fields}, models: [m]}}\n"
    with pytest.raises(InventoryError, match=rf"^<inventory>:2:\d+: backends\.0\.{field}: .*{said}") as info:
        parse_inventory(text)
    assert "SEC" not in str(info.value)


def test_a_url_without_secrets_is_still_quoted_whole() -> None:
    with pytest.raises(InventoryError, match=r"'ftp://host:8000/a' must be an http://"):
        parse_inventory('backends:\n  - {name: b, url: "ftp://host:8000/a", models: [m]}\n')
