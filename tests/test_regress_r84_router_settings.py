"""Review R84 (regression): the router's ``tie_tolerance`` and ``affinity_slack`` were moved onto
the shared ``check_finite_non_negative``, but ``metrics_max_age_s`` kept a bare ``not x >= 0``
(text raised an untyped ``TypeError``; infinity and ``10**400`` passed), and a ``SpeedModel`` was
never checked: ``base_s=10**400`` raised an untyped ``OverflowError`` at the first routed call.
Each is now an ``InputError`` naming the setting when it is made."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.baselines import BASELINES
from agentgate.dispatch.router import Router
from agentgate.dispatch.state import SpeedModel
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


@pytest.mark.parametrize("value", ["2", None, float("inf"), float("nan"), 10**400, -1, True])
@pytest.mark.parametrize("policy", [Router, *BASELINES.values()], ids=lambda p: p.__name__)
def test_a_metrics_max_age_that_is_no_finite_number_is_refused_when_made(policy: Any, value: object) -> None:
    with pytest.raises(InputError, match=r"^router metrics_max_age_s must be a finite number >= 0, got "):
        policy(INVENTORY, metrics_max_age_s=value)


STEP_COSTS = ["base_s", "decode_seq_s", "kv_read_s", "prefill_token_s", "attention_pair_s"]


@pytest.mark.parametrize("value", [10**400, float("inf"), float("nan"), -1e-3, "0.01", None, True])
@pytest.mark.parametrize("setting", STEP_COSTS)
def test_a_speed_model_step_cost_that_is_no_finite_number_is_refused_naming_it(
    setting: str, value: object
) -> None:
    with pytest.raises(InputError, match=rf"^SpeedModel {setting} must be a finite number >= 0, got "):
        SpeedModel(**{setting: value})


@pytest.mark.parametrize("value", [0, -1, 10**400, 10**12 + 1, 8192.0, "8192", True])
def test_a_speed_model_batch_that_is_no_whole_number_in_range_is_refused(value: object) -> None:
    with pytest.raises(InputError, match=r"^SpeedModel max_batched_tokens must be a whole number from 1 to "):
        SpeedModel(max_batched_tokens=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("speed", [object(), {"b": "fast"}], ids=["object", "mapping-of-text"])
def test_a_speed_that_is_no_speed_model_is_refused_when_the_router_is_made(speed: object) -> None:
    with pytest.raises(InputError, match=r"^router speed for backend 'b' must be a SpeedModel, got "):
        Router(INVENTORY, speed=speed)  # type: ignore[arg-type]


def test_extreme_but_valid_settings_still_route() -> None:
    big = 1.7e308
    speed = SpeedModel(
        base_s=big,
        decode_seq_s=big,
        kv_read_s=big,
        prefill_token_s=big,
        attention_pair_s=0,
        max_batched_tokens=10**12,
    )
    router = Router(INVENTORY, speed=speed, metrics_max_age_s=0)
    request = Dispatcher(INVENTORY, Router(INVENTORY)).route_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi" * 1000}]}
    )
    assert router.route(request, 0.0).backend == "b"
