"""The inventory's cross-reference check does a bounded number of comparisons per GPU a backend
lists (agentgate/dispatch/inventory.py, ``Inventory._references_resolve``).

Review R69: review R63's test of this compared two timings (a listed inventory within 10 times an
unlisted one plus 0.1 s, best of 3), which a loaded machine can fail and a fast one can pass with
quadratic work. These tests count the work instead: every GPU id is a ``str`` that counts each
hash and equality test made on it, so the count is the same on any machine."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.dispatch.inventory import GPU, Backend, Node, inventory_from_mapping
from agentgate.errors import InventoryError


class _Tally:
    comparisons = 0


class _CountedId(str):
    """A GPU id that counts the hashing and equality tests done on it (``in`` on a set hashes
    and then compares; ``in`` on a list or tuple compares with each item)."""

    __slots__ = ()

    def __hash__(self) -> int:
        _Tally.comparisons += 1
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        _Tally.comparisons += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        _Tally.comparisons += 1
        return str.__ne__(self, other)


def _counted_inventory(count: int) -> dict[str, Any]:
    """An inventory of ``count`` GPUs, all listed by one backend, each id written once in the GPU
    list and once in the backend's (two equal strings, not one object, as a parsed file gives).
    The entries are built models, which validation takes as they are (pydantic would turn a
    ``str`` subclass into a plain ``str``), so the check that ties them together runs on them."""
    gpus = [
        GPU.model_construct(id=_CountedId(f"g{i}"), type="H100", memory_gb=80.0, node="n", nvlink_domain=None)
        for i in range(count)
    ]
    backend = Backend(name="b", url="http://127.0.0.1:8000", models=("m",))
    listed = tuple(_CountedId(f"g{i}") for i in range(count))
    return {
        "nodes": [Node(name="n")],
        "gpus": gpus,
        "backends": [backend.model_copy(update={"gpus": listed})],
    }


def _comparisons(data: dict[str, Any]) -> int:
    _Tally.comparisons = 0
    inventory = inventory_from_mapping(data, read_keys=False)
    assert len(inventory.backends[0].gpus) == len(inventory.gpus)  # validated, nothing dropped
    return _Tally.comparisons


@pytest.mark.parametrize("count", [1_000, 4_000])
def test_a_backend_listing_thousands_of_gpus_is_checked_in_linear_work(count: int) -> None:
    """Review R69 (for review R63's finding): a GPU a backend lists twice was looked for in the
    slice of the list before it, for every GPU: quadratic, about count**2 / 2 comparisons (8
    million for 4,000 GPUs; a backend listing 22,000 took 7 s). The check keeps a set of the GPUs
    seen: a few hashes and comparisons per GPU, whatever the count. R63's test showed this by
    timing, which is no assertion about behaviour; this one counts."""
    per_gpu = _comparisons(_counted_inventory(count)) / count
    assert per_gpu <= 16, per_gpu


def test_the_count_sees_quadratic_work() -> None:
    """Review R69: the counted ids do count what a quadratic check would do (``in`` on the slice
    before each GPU, R63's defect), so the bound above is not passed by counting nothing."""
    listed = _counted_inventory(1_000)["backends"][0].gpus
    _Tally.comparisons = 0
    assert not any(gpu_id in listed[:j] for j, gpu_id in enumerate(listed))
    assert _Tally.comparisons >= 1_000 * 999 // 2


def test_a_counted_inventory_still_refuses_a_gpu_listed_twice() -> None:
    """Review R69: the counted inventory goes through the same check as a parsed one: a repeat in
    the backend's list is refused at the repeat."""
    data = _counted_inventory(50)
    backend = data["backends"][0]
    data["backends"] = [backend.model_copy(update={"gpus": (*backend.gpus, _CountedId("g7"))})]
    with pytest.raises(InventoryError) as caught:
        inventory_from_mapping(data, source="inv.yaml", read_keys=False)
    assert str(caught.value) == "inv.yaml: backends.0.gpus.50: backend 'b': gpu 'g7' is listed twice"
