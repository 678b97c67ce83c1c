"""Review R87: ``Engine`` and ``SimServer`` took any ``model`` and ``config``. ``PROFILES`` is keyed
by name, and passing the name (``SimServer("llama-3.1-8b@h200")``) or a dict of engine settings
failed with a bare ``AttributeError`` (``'str' object has no attribute 'kv_capacity_tokens'``); an
empty dict was silently read as the default settings. Each is now an ``InputError`` naming the
argument, and a profile's name names the known ones."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, PROFILES, Engine, EngineConfig, SimServer


@pytest.mark.parametrize("make", [Engine, SimServer])
def test_a_profile_name_is_refused_naming_the_known_profiles(make: type) -> None:
    with pytest.raises(InputError) as refused:
        make("llama-3.1-8b@h200")
    message = str(refused.value)
    assert message.startswith("model must be a LatencyModel, not the text 'llama-3.1-8b@h200'")
    assert all(repr(name) in message for name in PROFILES)


@pytest.mark.parametrize("make", [Engine, SimServer])
@pytest.mark.parametrize("model", [None, 5, {"name": "x"}])
def test_a_model_of_another_type_is_refused_by_its_type(make: type, model: object) -> None:
    with pytest.raises(InputError, match=r"^model must be a LatencyModel, not (None|5|a dict)$"):
        make(model)


@pytest.mark.parametrize("make", [Engine, SimServer])
@pytest.mark.parametrize("config", [{"max_num_seqs": 4}, {}, "default"])
def test_a_config_that_is_no_engine_config_is_refused(make: type, config: object) -> None:
    with pytest.raises(InputError, match=r"^config must be an EngineConfig or None, not a (dict|str)"):
        make(LLAMA_8B_H100, config)


def test_an_engine_config_and_none_are_still_taken() -> None:
    assert Engine(LLAMA_8B_H100, EngineConfig(max_num_seqs=4)).config.max_num_seqs == 4
    assert SimServer(PROFILES["qwen3-32b"], None).engine.model is PROFILES["qwen3-32b"]
