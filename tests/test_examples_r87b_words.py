"""Review R87b: what an endpoint said is scrubbed of AGENTGATE_OPENAI_API_KEY before it is cut to
the line, and only as much of it as the line can show. Until then an answer that is an error
object had its words cut to 86 characters first, so a key standing at the cut kept up to 7 of its
characters (under the 8 that ``_scrub`` finds), and ``_words`` scrubbed all of a proxy's error page
of megabytes, a character at a time, to show 200 characters of it."""

from __future__ import annotations

from typing import Any

import pytest
from test_examples_r58_endpoint import common as common  # the fixture

KEY = "sk-live-0123456789abcdefSECRET"


def _trouble(common: Any, answer: dict[str, Any]) -> str:
    endpoint = common.EndpointSettings(
        base_url="http://127.0.0.1:9/v1", model="x", api_key=KEY, timeout=1.0, retries=0
    )
    with pytest.raises(common._UnusableAnswer) as unusable:
        common._as_langchain_reads_it(answer)
    return str(common._endpoint_trouble(unusable.value, endpoint, "x"))


def test_a_key_at_the_cut_of_an_error_objects_words_is_redacted_before_the_cut(common: Any) -> None:
    said = _trouble(common, {"error": {"message": "x" * 78 + KEY}})
    assert KEY[:4] not in said
    assert said.startswith(
        f"the endpoint failed the model call (its answer is an error: {'x' * 78}[redact…) at "
    )


def test_an_answer_with_no_choice_is_said_so_as_before(common: Any) -> None:
    assert _trouble(common, {"choices": None}).startswith(
        "the endpoint answered no message (its choices are null) at "
    )


def test_only_the_start_of_a_long_page_is_scrubbed(common: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    scrubbed: list[int] = []

    def counting(text: str, key: str | None) -> str:
        scrubbed.append(len(text))
        return str(scrub(text, key))

    scrub = common._scrub
    monkeypatch.setattr(common, "_scrub", counting)
    page = f"Error code: 502 - {KEY} <html>" + "<p>bad gateway</p>\n" * 500_000
    said = common._words(page, KEY, 200)
    assert said == common._short(f"Error code: 502 - [redacted] <html>{'<p>bad gateway</p> ' * 20}", 200)
    assert scrubbed and max(scrubbed) <= common._READ


@pytest.mark.parametrize("before", [0, 5, 17])
def test_a_page_that_is_the_key_again_and_again_shows_none_of_it(common: Any, before: int) -> None:
    """Its first ``_READ`` characters scrub to one marker: the rest is read too, and no piece of
    the key the cut split is shown."""
    page = "a" * before + KEY * 700 + "! and then the words"  # 21,000 characters: past _READ
    said = common._words(page, KEY, 200)
    assert said == "a" * before + "[redacted]! and then the words"
