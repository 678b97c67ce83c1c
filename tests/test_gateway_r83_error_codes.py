"""Every error code the gateway answers with or counts is one docs/gateway.md lists (review R83).

``agentgate_gateway_errors_total{status,code}`` is bounded because its codes are the gateway's
own, "listed under Errors", the docs said; until R83 the list lacked 499 ``caller_gone`` (counted,
never sent), ``invocation_refused``, the fallbacks ``refused`` and ``invalid``, and a call that
failed for a reason of no known kind was counted under its exception's class name. The codes are
read here from the gateway's source, where they are written: as the code argument of the calls
that make or count an error answer, as the code beside a status in a tuple, and as the values of
a table keyed by status."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from agentgate.dispatch.gateway._errors import _dispatch_error
from agentgate.errors import AgentGateError, InputError, StoreError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "agentgate" / "dispatch" / "gateway").glob("*.py"))
DOCS = ROOT / "docs" / "gateway.md"

CODE_ARGUMENT = {
    "error_response": 2,  # (status, message, code)
    "GatewayDecision": 2,  # (auth, status, code)
    "refuse": 2,  # (call, status, code, reason)
    "_count_error": 1,  # (status, code)
    "_error_event": 1,  # (message, code)
}
"""The calls that make or count an error answer, each with the position of its code argument."""
STATUS_TABLES_OF_TYPES = {"_ERROR_TYPES"}
"""Tables keyed by status whose values are OpenAI's error types, not codes."""


def _name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_status(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and 400 <= node.value <= 599


def _code_expressions(tree: ast.AST) -> list[ast.expr]:
    """Every expression of ``tree`` in the place of an error code."""
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            args = list(node.args)
            name = _name(node.func)
            if name == "_blocking" and args and _name(args[0]) == "refuse":  # ``_blocking(refuse, ...)``
                name, args = "refuse", args[1:]
            if name in CODE_ARGUMENT:
                at = CODE_ARGUMENT[name]
                found += [args[at]] if len(args) > at else []
                found += [k.value for k in node.keywords if k.arg == "code"]
        elif isinstance(node, ast.Tuple):
            # ``(status, code, message)``, ``(auth, status, code)``: the code follows its status.
            found += [after for before, after in itertools.pairwise(node.elts) if _is_status(before)]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if node.value.keys and all(k is not None and _is_status(k) for k in node.value.keys):
                found += [] if targets & STATUS_TABLES_OF_TYPES else node.value.values
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "code" for t in node.targets
        ):
            found.append(node.value)
    return found


def _codes() -> dict[str, str]:
    """Every code written in the gateway's source, with where."""
    codes: dict[str, str] = {}
    for path in SOURCES:
        for expression in _code_expressions(ast.parse(path.read_text(), str(path))):
            for node in ast.walk(expression):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    codes.setdefault(node.value, f"{path.name}:{node.lineno}")
    return codes


def _errors_table() -> str:
    text = DOCS.read_text()
    section = text[text.index("\n## Errors\n") :]
    section = section[: section.index("\n## ", 1)]
    return "\n".join(line for line in section.splitlines() if line.startswith("| "))


def _metrics_section() -> str:
    text = DOCS.read_text()
    section = text[text.index("\n## Metrics\n") :]
    return section[: section.index("\n## ", 1)]


def test_every_code_the_gateway_answers_with_or_counts_is_in_the_errors_table() -> None:
    """Review R83: ``caller_gone`` (499, counted in ``/metrics``), ``invocation_refused`` and the
    fallbacks ``refused`` and ``invalid`` were codes the gateway could count that its Errors
    table never listed."""
    codes = _codes()
    # The reader finds what it is meant to, the codes the review named among them.
    assert {"caller_gone", "invocation_refused", "backend_failed", "not_found", "shed"} <= set(codes)
    table = _errors_table()
    missing = {code: where for code, where in codes.items() if f"`{code}`" not in table}
    assert missing == {}, f"codes the Errors table of docs/gateway.md does not list: {missing}"


def test_no_code_is_an_exception_class_name() -> None:
    """Review R83: a call that failed for a reason of no kind the gateway answers was counted (and
    answered) under ``type(exc).__name__``: any exception class reaching there became a label of
    ``agentgate_gateway_errors_total``."""
    named = [
        f"{path.name}:{expression.lineno}"
        for path in SOURCES
        for expression in _code_expressions(ast.parse(path.read_text(), str(path)))
        if any(isinstance(node, ast.Attribute) and node.attr == "__name__" for node in ast.walk(expression))
    ]
    assert named == []


def test_an_error_of_no_known_kind_is_answered_under_a_fixed_documented_code() -> None:
    """Errors that are not the dispatcher's (``DispatchError``s are answered by kind) get one code."""

    class SomeNewError(AgentGateError):
        pass

    for error in (SomeNewError("x"), InputError("tenant name"), StoreError("gone")):
        answer = _dispatch_error(error)
        assert answer.status_code == 503
        assert getattr(answer, "code", None) == "not_served", type(error).__name__
    assert "`not_served`" in _errors_table()


def test_the_metrics_section_says_a_caller_gone_is_counted_499_never_sent() -> None:
    metrics = _metrics_section()
    assert re.search(r'status="499", code="caller_gone"', metrics), metrics[:400]
    assert "never sent" in metrics
