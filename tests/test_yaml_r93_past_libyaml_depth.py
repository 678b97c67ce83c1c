"""Review R93: a file nested deeper than libyaml's own limit (1,000 levels) was refused where
libyaml stopped, in its words ("p.yaml:2:1003: malformed YAML: ... exceeded maximum nesting
depth"), and without libyaml where it first nests past ``MAX_DEPTH`` ("p.yaml:2:103: nested more
than 100 levels deep"). Such a text is now parsed again with PyYAML's own parser, as a text
libyaml refuses for another reason is, and gets the same error and place from either parser
(agentgate/_yaml.py, ``_refused``)."""

from __future__ import annotations

import pytest
import yaml
from test_yaml import _error, parser  # noqa: F401 (the fixture)

import agentgate._yaml
from agentgate._yaml import _PureLoader, _Window

DEPTH = 1200
"""Past libyaml's own limit of 1,000 levels."""

PAST_LIBYAML = [
    pytest.param("version: 1\nx: " + "[" * DEPTH + "]" * DEPTH + "\n", (2, 103), id="flow-list"),
    pytest.param("version: 1\nx:\n" + " {a:\n" * DEPTH + " }" * DEPTH + "\n", (102, 2), id="flow-mapping"),
    pytest.param("".join(" " * i + "-\n" for i in range(DEPTH)), (101, 101), id="block-list"),
    pytest.param("".join(" " * i + "k:\n" for i in range(DEPTH)), (101, 101), id="block-mapping"),
    pytest.param(
        "version: 1\nx:\n" + " [{a:\n" * (DEPTH // 2) + " }]" * (DEPTH // 2) + "\n", (52, 3), id="mixed"
    ),
    pytest.param(
        "version: 1\nx:\n" + " [\n" * DEPTH + "a, b: c: d" + "]" * DEPTH + "\n",
        (102, 2),
        id="malformed-inside",
    ),
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize(("text", "where"), PAST_LIBYAML)
def test_a_file_nested_past_libyamls_limit_is_refused_where_it_nests_too_deep(
    text: str, where: tuple[int, int]
) -> None:
    error = _error(text)
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == where, error
    assert str(error).startswith(f"p.yaml:{where[0]}:{where[1]}: ")


SCANNED = [
    "a: " + "[" * 1100 + "]" * 1100,
    "a: [" + "b, " * 600 + "{c: [d, e]}]\nf: g\n",
    "a: [b,\n c: d, [e]: f]\n",
    "? " + "x" * 1100 + "\n: y\n",
    "a\nb: c\n",  # a required simple key gone stale: PyYAML's own error
    "x: " + "{k: " * 300 + "v" + "}" * 300 + "\n",
]


@pytest.mark.parametrize("text", SCANNED)
def test_the_rereads_scanner_makes_the_tokens_and_errors_pyyamls_own_does(text: str) -> None:
    """``_PureLoader`` (the parser without libyaml) and ``_Window`` (its bounded re-read) look at
    possible simple keys only as far as they need (so that reading a line of '[' is cheap): their
    tokens and errors are PyYAML's own."""

    def scanned(loader: yaml.SafeLoader) -> list[object]:
        out: list[object] = []
        try:
            while (token := loader.get_token()) is not None:
                out.append((type(token).__name__, token.start_mark.index, token.end_mark.index))
        except yaml.YAMLError as exc:
            out.append(str(exc))
        finally:
            loader.dispose()
        return out

    assert scanned(_Window(text)) == scanned(yaml.SafeLoader(text))
    assert scanned(_PureLoader(text)) == scanned(yaml.SafeLoader(text))


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML is built without libyaml")
def test_past_the_reread_window_libyamls_depth_error_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented exception (docs/policy-reference.md): a file that nests past libyaml's
    limit only beyond the part read again (``_REREAD_CHARACTERS``) is refused where libyaml
    stopped, in its words; without libyaml, where it nests past ``MAX_DEPTH``."""
    text = 'a: "' + "q" * agentgate._yaml._REREAD_CHARACTERS + '"\nx: ' + "[" * DEPTH + "\n"
    monkeypatch.setattr(agentgate._yaml, "_Loader", yaml.CSafeLoader)
    error = _error(text)
    assert "exceeded maximum nesting depth" in error.message, error.message
    assert (error.line, error.column) == (2, 1003), error
    monkeypatch.setattr(agentgate._yaml, "_Loader", _PureLoader)
    error = _error(text)
    assert "nested more than 100 levels deep" in error.message, error.message
    assert (error.line, error.column) == (2, 103), error
