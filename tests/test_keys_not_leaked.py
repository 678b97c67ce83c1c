"""Review R48, leaks: where user data or key material could escape into evidence, spans, logs,
CLI output or exception messages, on paths review R38 (resources) and R47 (a backend's error
body echoing the prompt) did not cover.

Real components: a ``Gate`` on a SQLite file (every byte of the database and its WAL is
searched), the opentelemetry-sdk in-memory exporter, ``caplog`` at DEBUG on every logger, real
LangGraph agents driven by ``ScriptedChatModel``, the ``agentgate`` CLI in-process.

Found and fixed (were strict xfails; fixed by the lead in agentgate/keys.py ``refuse_key_text``,
used by the key loaders and agentgate/store/audit.py):
- a log key given by its content instead of its path (``AGENTGATE_LOG_KEY="$(cat log.key)"``,
  or a platform's secret mapped to an environment variable, as Kubernetes' ``secretKeyRef``
  does) is quoted whole in the ``KeyFileError`` that ``Gate.open``, ``agentgate serve`` and
  every ``agentgate audit`` verb print or log: the log's private signing key, in a log line;
- the same for a private key given in ``AGENTGATE_LOG_PREVIOUS_KEYS`` (a list of *public* keys,
  where the old ``log.key`` is pasted by mistake during a rotation).
  ``api_key_file`` already guards the same mistake ("a relative path is not quoted: it is most
  likely the key itself", tests/test_backend_credentials.py). The read-only ``agentgate audit``
  verbs quote it too (agentgate/cli/_common.py, "PATH: no log key there").

Found and fixed (agentgate/policy/_load.py): a policy's ``did:`` holding a private key
(a PEM block, its base64 line, a hex seed) is quoted whole in the ``PolicyError`` that
``agentgate policy lint`` prints (a CI log) and ``Gate.open`` raises.

What holds (tested here, not pinned elsewhere):
- in a whole LangGraph run with a delegation, the user's prompt, the delegation's task text (the
  supervisor model's words to its sub-agent), the sub-agent's answer and the supervisor's final
  answer (generated text) reach no byte of the store, no span and no log record.

What holds (checked, already pinned elsewhere, or no promise made): argument values of every
odd type (bytes, sets, lone surrogates, huge integers, nested objects, non-text keys) and
undeclared argument names reach no audit byte, span or log (test_secrets_and_delegation.py,
test_observability*.py pin the common cases); an approval request's payload and reasons
hold no non-loggable value; a backend URL with ``user:password@`` is refused without quoting the
password; store URL passwords (R35/R36/R38); a caller's non-agentgate bearer token is never
quoted (``not an agentgate token``); the gateway runs with no access log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from test_observability import Sweep, _calls, _span_bytes

from agentgate.cli.main import main
from agentgate.errors import KeyFileError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey, save_key

# --- a log key given by its content, not its path ---------------------------------------------


def _private_pem(tmp_path: Path) -> str:
    """The text of a private key file as ``agentgate keys new`` writes it (PKCS#8 PEM)."""
    key_path, _ = save_key(SigningKey.generate(), tmp_path / "made", "log")
    return key_path.read_text()


def _secret_part(pem: str) -> str:
    """The base64 line of the PEM block, without its 22 characters that every Ed25519 PKCS#8 key
    shares (``MC4CAQAwBQYDK2VwBCIEI`` and the first seed bits): the seed."""
    (line,) = [x for x in pem.splitlines() if x and not x.startswith("-----")]
    return line[22:]


def _quotes_a_piece(message: str, secret: str, size: int = 12) -> bool:
    """Whether ``message`` holds any ``size``-character piece of ``secret``."""
    return any(secret[i : i + size] in message for i in range(len(secret) - size + 1))


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\n")
    return path


@pytest.mark.parametrize("form", ["file-content", "stripped", "base64-line"])
def test_a_log_key_given_by_its_content_is_refused_without_quoting_it(
    tmp_path: Path, policy: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """docs/operations.md: ``AGENTGATE_LOG_KEY`` names the key *file*. A key put there itself (an
    env file's ``$(cat log.key)``, a secret mapped to a variable) must be refused, naming the
    variable, without the key in the message: ``Gate.open``'s error is what a service logs."""
    pem = _private_pem(tmp_path)
    value = {"file-content": pem, "stripped": pem.strip(), "base64-line": pem.splitlines()[1]}[form]
    monkeypatch.setenv("AGENTGATE_LOG_KEY", value)
    with pytest.raises(KeyFileError) as refused:
        Gate.open(policy, str(tmp_path / "agentgate.db")).close()
    message = str(refused.value)
    assert "AGENTGATE_LOG_KEY" in message, message
    assert not _quotes_a_piece(message, _secret_part(pem)), f"the log's private key is quoted: {message}"


@pytest.mark.parametrize("verb", ["checkpoint", "verify", "show"])
def test_the_cli_prints_no_log_key_given_by_its_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """``agentgate audit checkpoint`` (which signs) and ``verify`` / ``show`` (which read the log
    key when no ``--key`` is given) answer one ``agentgate: error:`` line, exit 2, that names the
    variable and not the key it holds."""
    db = str(tmp_path / "agentgate.db")
    monkeypatch.chdir(tmp_path)
    assert main(["store", "init", "--store", db]) == 0
    capsys.readouterr()
    pem = _private_pem(tmp_path)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", pem.strip())
    code = main(["audit", verb, "--store", db])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("agentgate: error:") and "AGENTGATE_LOG_KEY" in err, (code, err)
    assert not _quotes_a_piece(out + err, _secret_part(pem)), f"the CLI printed the log's private key: {err}"


def test_a_private_key_given_as_a_previous_log_key_is_refused_without_quoting_it(
    tmp_path: Path, policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AGENTGATE_LOG_PREVIOUS_KEYS`` lists public keys (files or did:keys); the old ``log.key``'s
    content pasted there in a rotation is refused, the variable named, the key not quoted."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "keys" / "log.key"))
    pem = _private_pem(tmp_path)
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", pem.strip())
    with pytest.raises(KeyFileError) as refused:
        Gate.open(policy, str(tmp_path / "agentgate.db")).close()
    message = str(refused.value)
    assert "AGENTGATE_LOG_PREVIOUS_KEYS" in message, message
    assert not _quotes_a_piece(message, _secret_part(pem)), f"a private key is quoted: {message}"


def test_a_log_key_path_is_still_quoted_when_it_is_a_path(
    tmp_path: Path, policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the fix: a value that is a path (here, one not ending in ``.key``) is
    still named in the refusal, so the operator can find the file meant."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "keys" / "log.pem"))
    with pytest.raises(KeyFileError) as refused:
        Gate.open(policy, str(tmp_path / "agentgate.db")).close()
    assert str(tmp_path / "keys" / "log.pem") in str(refused.value)


# --- a private key pasted into a policy's did: field ---------------------------------------------


def _pasted(pem: str, form: str) -> str:
    """The ``did:`` line of a policy whose author pasted the private key there."""
    if form == "pem-block":
        return "did: |\n" + "\n".join("      " + line for line in pem.strip().splitlines())
    if form == "base64-line":
        return f"did: '{pem.splitlines()[1]}'"
    return f"did: '{SigningKey.generate().seed.hex()}'"  # a seed as tools print it (64 hex digits)


@pytest.mark.parametrize("form", ["pem-block", "base64-line", "hex-seed"])
def test_a_private_key_pasted_as_a_did_is_refused_without_quoting_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """A trust anchor's ``did:`` holding a private key is refused at its line (the policy is
    unusable), and ``agentgate policy lint`` says so in one line without the key: an inventory's
    literal ``api_key`` is refused the same way (tests/test_backend_credentials.py)."""
    pem = _private_pem(tmp_path)
    line = _pasted(pem, form)
    secret = line.split("'")[1] if form == "hex-seed" else _secret_part(pem)
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"version: 1\ntrust_anchors:\n  root:\n    {line}\n")
    try:
        code = main(["policy", "lint", str(policy)])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and f"{policy}:4" in err, (code, out, err)
    assert not _quotes_a_piece(out + err, secret), f"the private key is printed: {err}"


# --- prompts, delegation tasks and generated text in a whole LangGraph run ---------------------


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    made = Sweep(tmp_path)
    yield made
    made.gate.close()


def _store_bytes(directory: Path) -> bytes:
    """Every byte of the SQLite store: the database, its WAL and any journal."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("agentgate.db*")))


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_prompt_delegated_task_and_generated_text_reach_no_store_byte_span_or_log(
    sweep: Sweep, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """docs/gateway.md and docs/audit-format.md: a model call's record holds its settings, never
    its prompt or answer. The delegation tool's ``task`` (the supervisor model's prompt to its
    sub-agent) and the sub-agent's answer are text of the same kind: none of them is in the
    audit log, any other table, a span or a log record (DEBUG, every logger)."""
    import asyncio

    gate = sweep.gate
    tools = sweep.tools()
    helper = create_gated_agent(
        gate,
        name="helper",
        model=ScriptedChatModel(turns=[AIMessage(content="HELPER-ANSWER-CANARY account 991")]),
        tools=tools[:1],
    )
    ask = delegation_tool(
        gate,
        name="helper",
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    boss = create_gated_agent(
        gate,
        name="boss",
        model=ScriptedChatModel(
            turns=[
                _calls(("ask_helper", {"task": "TASK-CANARY find the account of ssn 123-45-6789"})),
                AIMessage(content="FINAL-CANARY the account is 991"),
            ]
        ),
        tools=[*tools, ask],
    )
    prompt: Any = {"messages": [{"role": "user", "content": "PROMPT-CANARY my ssn is 123-45-6789"}]}
    with caplog.at_level(logging.DEBUG):
        if mode == "invoke":
            done = boss.invoke(prompt, context=sweep.boss)
        else:
            done = asyncio.run(boss.ainvoke(prompt, context=sweep.boss))
        gate.flush()
    assert "FINAL-CANARY" in str(done["messages"][-1].content)  # the run went through
    assert any(e.resource == "agent:helper" for e in gate.audit.entries())  # the delegation was decided
    stored, spans = _store_bytes(tmp_path), _span_bytes(sweep.exporter)
    for canary in ("PROMPT-CANARY", "TASK-CANARY", "HELPER-ANSWER-CANARY", "FINAL-CANARY", "123-45-6789"):
        assert canary.encode() not in stored, f"{canary} is in the store"
        assert canary not in spans, f"{canary} is in a span"
        assert canary not in caplog.text, f"{canary} is in a log record"
    assert re.search(r"execute_tool ask_helper", spans)
