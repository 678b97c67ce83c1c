"""Review R60 of the inventory the broker reads: a GPU memory that is not a finite number, and
an inventory without GPUs shown by ``agentgate broker inventory``.

Each is refused with an ``InventoryError`` that says what is wrong and where: a NaN memory was
refused as "less than or equal to 4096", which it is not a number to be; an inventory with no GPU
was one line that named no file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError

_GPU = "nodes: [{{name: n1}}]\ngpus:\n  - {{id: g0, type: H100, memory_gb: {memory}, node: n1}}\n"


@pytest.mark.parametrize("memory", [".nan", ".NaN", ".inf", "-.inf"])
def test_a_gpu_memory_that_is_not_a_finite_number_is_refused_as_such(memory: str) -> None:
    """Review R60: memory_gb: .nan was refused as "Input should be less than or equal to 4096"."""
    with pytest.raises(InventoryError) as refused:
        parse_inventory(_GPU.format(memory=memory), source="cluster.yaml", read_keys=False)
    assert str(refused.value) == "cluster.yaml:3:37: gpus.0.memory_gb: Input should be a finite number"


@pytest.mark.parametrize("text", ["", "nodes: [{name: n1}]\n", "nodes: [{name: n1}]\ngpus: []\n"])
def test_broker_inventory_of_an_inventory_without_gpus_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    """Review R60: `agentgate broker inventory` of an inventory with no GPU said only "the broker
    needs at least one GPU", naming no file."""
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    code = main(["broker", "inventory", "--inventory", str(path), "--store", str(tmp_path / "none.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert err == f"agentgate: error: {path}: declares no GPUs: the broker has none to lease\n"
