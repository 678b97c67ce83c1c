"""Review R84: the work of reporting a policy's schema errors when every one of thousands of
mappings has one. Pairing a missing field with the unknown field that misspells it compared every
error with every other (a 193 KB policy of 12,000 ``qN: {w: 1}`` quotas took over a minute to be
refused). Work is counted (Python and C function calls, ``sys.setprofile``), never timed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_policy_scale import calls_made

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def misspelt_quotas(count: int) -> str:
    """``count`` quotas, each writing ``window:`` for the required ``window_s:``."""
    quotas = "".join(f"  q{i}: {{tenant: t, limit: 1, window: 60}}\n" for i in range(count))
    return "version: 1\ntenants: {t: {}}\nquotas:\n" + quotas


def bare_quotas(count: int) -> str:
    """``count`` quotas, each of one unknown field that spells no required one."""
    return "version: 1\nquotas:\n" + "".join(f"  q{i}: {{w: 1}}\n" for i in range(count))


def refusal(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    return refused.value


def refusal_work(text: str) -> int:
    return calls_made(lambda: refusal(text))


@pytest.mark.parametrize("policy", [misspelt_quotas, bare_quotas])
def test_refusing_many_mappings_each_with_an_error_is_linear_in_the_errors(
    policy: Callable[[int], str],
) -> None:
    """Review R84: each missing field was compared with every error of the policy, and each error
    with every paired one, before the first was reported."""
    small, large = refusal_work(policy(100)), refusal_work(policy(400))
    assert large <= 5 * small, (small, large)  # linear: ~4x; it was ~9x and ~10x


def test_a_field_misspelt_in_every_mapping_is_still_one_error_each() -> None:
    """The pairing reports what it reported before: the misspelt field as written, suggesting the
    required one, and each pair counted as one error."""
    error = refusal(misspelt_quotas(2000))
    assert error.message == "unknown field quotas.q0.window (and 1999 more errors)"
    assert error.hint == "did you mean 'window_s'?"
    assert (error.line, error.column) == (4, 29)
    error = refusal(bare_quotas(2000))
    assert error.message == "quotas.q0.window_s is required (and 5999 more errors)"
    assert error.hint == "add it"


def test_the_unknown_field_closest_to_the_missing_one_is_the_one_reported() -> None:
    """Of two unknown fields in one mapping that both spell a missing one, the closer is paired
    with it; the other stays an error of its own."""
    error = refusal(
        "version: 1\ntenants: {t: {}}\nquotas:\n  a: {tenant: t, limit: 1, windo_s: 60, window: 3}\n"
    )
    assert error.message == "unknown field quotas.a.windo_s (and 1 more error)"
    assert error.hint == "did you mean 'window_s'?"
