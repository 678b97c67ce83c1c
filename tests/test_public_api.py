"""The public face: names import from the top, and the core never imports a framework."""

from __future__ import annotations

import subprocess
import sys

import agentgate


def test_every_public_name_resolves() -> None:
    for name in agentgate.__all__:
        assert getattr(agentgate, name) is not None, name


def test_the_core_imports_without_any_framework() -> None:
    code = (
        "import sys, agentgate, agentgate.cli.main;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain', 'langchain_core')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_the_package_imports_no_layer_until_a_name_is_used() -> None:
    # The command line starts (and can catch Ctrl-C) before the layers load: each public name is
    # imported from its module on first use.
    code = (
        "import sys, agentgate;"
        "early = sorted(m for m in sys.modules if m.startswith('agentgate.') and m != 'agentgate._lazy');"
        "agentgate.Gate;"
        "print(early, 'agentgate.gate' in sys.modules); sys.exit(0 if not early else 1)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("True"), result.stdout + result.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        agentgate.Nope  # noqa: B018
