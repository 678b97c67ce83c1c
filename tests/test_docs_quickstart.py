"""The newcomer's path: README's "Using it", docs/quickstart.md and docs/langgraph.md
run as written, with only their placeholders filled in (a scripted model, fresh keys), against the
checkout's own policies. (The quickstart's own blocks run in tests/test_langgraph_newcomer.py.)"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey, save_key

ROOT = Path(__file__).resolve().parents[1]


def _blocks(markdown: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``markdown`` in order, also those indented in a list."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", markdown, flags=re.S | re.M)
    return [textwrap.dedent(block) for _, block in found]


def _section(markdown: str, heading: str) -> str:
    """The text under the ``## heading`` of ``markdown``, up to the next ``## `` heading."""
    start = markdown.index(f"## {heading}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


def _calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": n, "args": a, "id": f"call-{n}-{i}"} for i, (n, a) in enumerate(calls)]
    )


def _tools(ran: list[str]) -> dict[str, StructuredTool]:
    """The tools the docs' policies name, each recording its call in ``ran``."""

    def read(ticket_id: str) -> str:
        ran.append(f"tickets.read:{ticket_id}")
        return f"ticket {ticket_id}"

    def search(query: str, max_results: int = 5) -> str:
        ran.append(f"web.search:{query}:{max_results}")
        return f"results for {query}"

    def fetch(url: str) -> str:
        ran.append(f"web.fetch:{url}")
        return f"page {url}"

    def publish(path: str) -> str:
        ran.append(f"docs.publish:{path}")
        return f"published {path}"

    named = {"tickets.read": read, "web.search": search, "web.fetch": fetch, "docs.publish": publish}
    return {n: StructuredTool.from_function(func=f, name=n, description=n) for n, f in named.items()}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory with the default store, as a new user has."""
    monkeypatch.chdir(tmp_path)
    for name in ("AGENTGATE_STORE", "AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "policies").mkdir()
    return tmp_path


@pytest.fixture
def research(workdir: Path) -> dict[str, SigningKey]:
    """policies/research_team.yaml with a fresh key for each of its parties (it names them by
    did:key, whose private halves are not in the checkout), as examples/_common.py makes it."""
    text = (ROOT / "policies" / "research_team.yaml").read_text()
    document = yaml.safe_load(text)
    keys: dict[str, SigningKey] = {}
    for section in ("trust_anchors", "principals"):
        for name, spec in document[section].items():
            keys[name] = SigningKey.generate()
            text = text.replace(spec["did"], keys[name].did)
    (workdir / "policies" / "research_team.yaml").write_text(text)
    return keys


def test_readme_using_it_runs_with_its_placeholders_filled(workdir: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    (block,) = _blocks(_section(readme, "Using it"), "python")
    (workdir / "policies" / "support.yaml").write_text((ROOT / "policies" / "support.yaml").read_text())
    keys = {name: SigningKey.generate() for name in ("ops-root", "support-agent", "alice", "bob")}
    for name, key in keys.items():
        save_key(key, workdir / "policies" / "keys", name)
    ran: list[str] = []
    namespace: dict[str, Any] = {
        "anchor_key": keys["ops-root"],
        "agent_key": keys["support-agent"],
        "create_agent": create_agent,
        "model": ScriptedChatModel(turns=[_calls(("tickets.read", {"ticket_id": "T-1"}))]),
        "tools": [_tools(ran)["tickets.read"]],
        "config": {},
    }
    code = block.replace('{"messages": [...]}', '{"messages": [("user", "read T-1")]}')
    code = code.replace("agent.invoke(", "result = agent.invoke(")
    exec(compile(code, "README.md", "exec"), namespace)
    assert ran == ["tickets.read:T-1"]
    assert [m.type for m in namespace["result"]["messages"]] == ["human", "ai", "tool", "ai"]
    gate = Gate.open("policies/support.yaml")  # the block closed its gate: every outcome is in
    try:
        kinds = [(e.kind, e.resource) for e in gate.audit.entries()]
    finally:
        gate.close()
    assert kinds == [
        ("allow", "agent:support-agent"),
        ("allow", "tool:tickets.read"),
        ("outcome", "tool:tickets.read"),
    ]


def test_langgraph_md_installs_the_middleware_and_delegates_as_written(
    research: dict[str, SigningKey],
) -> None:
    install, delegate, _payload = _blocks((ROOT / "docs" / "langgraph.md").read_text(), "python")
    ran: list[str] = []
    # A chat model the endpoint names its own way: decided as the policy's model:llama-3.1-8b.
    search = _calls(("web.search", {"query": "papers", "max_results": 5}))
    namespace: dict[str, Any] = {
        "model": ScriptedChatModel(turns=[search], model_name="endpoint-model"),
        "tools": [_tools(ran)["web.search"]],
    }
    opening, _, rest = install.partition("agent = create_agent(")
    exec(compile(opening, "langgraph.md", "exec"), namespace)
    gate: Gate = namespace["gate"]
    try:
        namespace["supervisor_identity"] = gate.issue(
            research["research-root"], name="supervisor", key=research["supervisor"], role="supervisor"
        )
        rest = "agent = create_agent(" + rest.replace(
            '{"messages": [...]}', '{"messages": [("user", "go")]}'
        ).replace("agent.invoke(", "result = agent.invoke(")
        exec(compile(rest, "langgraph.md", "exec"), namespace)
        assert ran == ["web.search:papers:5"]

        fetch = _calls(("web.fetch", {"url": "https://arxiv.org/abs/1"}))
        namespace["researcher_key"] = research["researcher"]
        namespace["researcher_agent"] = create_gated_agent(
            gate,
            name="researcher",
            model=ScriptedChatModel(turns=[fetch]),
            tools=[_tools(ran)["web.fetch"]],
            model_name="llama-3.1-8b",
        )
        # This block names no model_name: the supervisor's model is named as the policy names it.
        ask = _calls(("ask_researcher", {"task": "find papers"}))
        namespace["model"] = ScriptedChatModel(turns=[ask], model_name="llama-3.1-8b")
        exec(
            compile(delegate.replace("[ask_researcher, ...]", "[ask_researcher]"), "langgraph.md", "exec"),
            namespace,
        )
        result = namespace["supervisor"].invoke(
            {"messages": [("user", "go")]}, context=namespace["supervisor_identity"]
        )
        assert ran[1:] == ["web.fetch:https://arxiv.org/abs/1"]
        assert [m.status for m in result["messages"] if m.type == "tool"] == ["success"]
        assert [(parent, child.name) for parent, child in gate.delegations] == [("supervisor", "researcher")]
    finally:
        gate.close()


def test_the_approval_payload_shown_holds_every_field_the_middleware_sends(
    research: dict[str, SigningKey],
) -> None:
    # docs/langgraph.md showed the interrupt's payload without its request's `action`, `grant`
    # and `call_id`, which the approval is bound to.
    shown = _blocks((ROOT / "docs" / "langgraph.md").read_text(), "python")[2]
    shown_request = re.search(r'"request": \{(.*)\}\}', shown, flags=re.S)
    assert shown_request is not None
    shown_keys = re.findall(r'^\s*"(\w+)":|[{,]\s*"(\w+)":', shown_request.group(1), flags=re.M)
    documented = {a or b for a, b in shown_keys}
    gate = Gate.open("policies/research_team.yaml")
    try:
        supervisor = gate.issue(
            research["research-root"], name="supervisor", key=research["supervisor"], role="supervisor"
        )
        publish = _calls(("docs.publish", {"path": "reports/final/report.md"}))
        agent = create_gated_agent(
            gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[publish]),
            tools=[_tools([])["docs.publish"]],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )
        state = agent.invoke(
            {"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}}, context=supervisor
        )
    finally:
        gate.close()
    payload = state["__interrupt__"][0].value
    assert payload["agentgate"] == "approval_required"
    assert documented == set(payload["request"]), sorted(documented ^ set(payload["request"]))
    literal = {
        k: ast.literal_eval(v)
        for k, v in re.findall(r'"(gate|resource|approvers|quorum)": ([^,\]]+\]?)', shown)
    }
    assert set(literal) == {"gate", "resource", "approvers", "quorum"}
    assert {k: payload["request"][k] for k in literal} == literal


def test_the_quickstart_says_what_make_clean_deletes_besides_build() -> None:
    # The quickstart offered `make clean` as the same as `rm -rf build`; it also deletes the
    # checkout's .venv and .agentgate/, the store (audit log, budgets) and log key kept there.
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^clean:\n\t(.*)$", makefile, flags=re.M)
    assert recipe is not None
    venv = re.search(r"^VENV \??:?= (\S+)$", makefile, flags=re.M)
    assert venv is not None
    deleted = set(recipe.group(1).replace("$(VENV)", venv.group(1)).split()) & {".venv", ".agentgate"}
    assert deleted == {".venv", ".agentgate"}
    doc = (ROOT / "docs" / "quickstart.md").read_text()
    mention = re.search(r"\(`make clean`[^)]*\)", doc)
    assert mention is not None
    assert all(f"`{name}" in mention.group(0) for name in deleted), mention.group(0)
