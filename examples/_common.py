"""What the examples share: a fresh demo directory, fresh keys, the model, and the one-screen summary.

Not part of the agentgate API. Every example runs offline by default with a scripted chat model;
with ``AGENTGATE_OPENAI_BASE_URL`` set it talks to any OpenAI-compatible endpoint instead
(docs/quickstart.md):

    AGENTGATE_OPENAI_BASE_URL=http://127.0.0.1:8000/v1   # vLLM, llama.cpp server, ...
    AGENTGATE_OPENAI_MODEL=meta-llama/Llama-3.1-8B-Instruct
    AGENTGATE_OPENAI_API_KEY=...                        # if the endpoint wants one
    AGENTGATE_OPENAI_TIMEOUT=60                         # seconds a try waits for the answer
    AGENTGATE_OPENAI_MAX_RETRIES=2                      # tries after a failed first one

(that mode needs ``pip install langchain-openai``). An empty value counts as unset; a timeout that
is no number of seconds above 0, retries that are no whole number from 0 to 100 (each written in
ASCII digits, a timeout with a decimal point where it wants one), or a missing
``langchain-openai`` end the example with one line and status 2, before anything is made; so does
a base URL that is no http(s) URL with a host (and a valid port, where it names one) or that holds
credentials (``user:password@``, which would be printed with it), and an API key that an
Authorization header cannot carry (white space, a control or non-ASCII character). A
model call the endpoint fails (unreachable, no answer in time, a refused key, a model it does not
serve, an error status, an answer that is no chat completion or holds no choice) stops the run
with ``EndpointFailed``, whose message names the endpoint and says what to check (the endpoint's
words in it with the API key redacted and each unprintable character escaped); the example then
prints its summary of what was decided until then and exits with 1.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import sys
import textwrap
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import _interrupt
import yaml
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import invalid_tool_call

from agentgate._shown import escaped, quoted
from agentgate.dispatch._redaction import _scrub
from agentgate.errors import KeyFileError, PolicyError
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import STOP_KEY, ScriptedChatModel
from agentgate.keys import SigningKey, save_key
from agentgate.policy import Policy, parse_policy

ROOT = Path(__file__).resolve().parents[1]


DEFAULT_DEMO_DIR = Path(".agentgate/demo")
_MADE_HERE = ".agentgate-demo"
"""The file a demo directory holds: only such a directory (or one under the default) is emptied."""


def demo_dir(name: str) -> Path:
    """``AGENTGATE_DEMO_DIR/NAME`` (default ``.agentgate/demo/NAME`` under the current directory),
    emptied: each run starts fresh. Under another ``AGENTGATE_DEMO_DIR``, a directory ``NAME`` that
    an example did not make is never emptied; an empty value is the default. Such a directory, or
    one it cannot empty or make, ends the example with one line saying which, and status 2 (a
    setting it cannot use, as every other: never 1, which means the model endpoint failed)."""
    base = Path(os.environ.get("AGENTGATE_DEMO_DIR", "").strip() or DEFAULT_DEMO_DIR)
    path = base / name
    # Looking is inside the try: a name too long for the file system (ENAMETOOLONG) or a place it
    # may not look into fails already there (review R85).
    try:
        if path.exists() and base != DEFAULT_DEMO_DIR and not (path / _MADE_HERE).exists():
            _misconfigured(
                f"{path} exists and was not made by an agentgate example: move it, or point "
                "AGENTGATE_DEMO_DIR elsewhere (nothing was removed)"
            )
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        (path / "keys").mkdir(parents=True)
        (path / _MADE_HERE).touch()
    except OSError as error:
        _misconfigured(
            f"cannot make the demo directory {path} ({error.strerror or error}: {error.filename}): "
            "point AGENTGATE_DEMO_DIR at a directory you can write"
        )
    return path


def fresh_keys(policy_file: Path, directory: Path) -> tuple[Policy, dict[str, SigningKey]]:
    """The policy with a freshly generated key for every trust anchor and principal.

    Each ``did:`` in the file is replaced by the new key's did:key, in place, so that the line
    numbers in decisions still point into the real file; ``key:`` files are written to
    ``directory/keys`` (with their private halves, 0600) and read from there. A file it cannot
    read, or that is no policy, ends the example with one line saying what and where (agentgate's
    ``PolicyError``: the file, and the line where it can), and status 2.
    """
    source = str(policy_file.relative_to(ROOT)) if policy_file.is_relative_to(ROOT) else str(policy_file)
    try:
        data = policy_file.read_bytes()
    except OSError as error:
        _misconfigured(f"{source}: cannot read the policy ({error.strerror or error})")
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError:
        document = None  # no YAML: parse_policy says what is wrong, and where
    keys: dict[str, SigningKey] = {}
    for section in ("trust_anchors", "principals"):
        entries = document.get(section) if isinstance(document, dict) else None
        for name, spec in entries.items() if isinstance(entries, dict) else ():
            key = keys[name] = SigningKey.generate()
            try:
                save_key(key, directory / "keys", name)
            except KeyFileError as error:  # a demo directory others may change (review R69)
                _misconfigured(str(error))
            did = spec.get("did") if isinstance(spec, dict) else None
            if isinstance(did, str) and did:
                data = data.replace(did.encode(), key.did.encode())
    try:
        return parse_policy(data, source=source, base_dir=directory), keys
    except PolicyError as error:
        _misconfigured(str(error))


class EndpointFailed(Exception):
    """A model call to the OpenAI-compatible endpoint failed; the message says how and what to check."""


class _UnusableAnswer(Exception):
    """The endpoint's answer holds no message (``choices`` null or empty) or is an error object;
    the message says which, as a person reads it after "the endpoint". ``said`` is an error
    object's own words as sent: ``_endpoint_trouble`` quotes them scrubbed of the key, then cut
    (until review R87b they were cut first, and a key at the cut kept its first 7 characters)."""

    def __init__(self, what: str, said: str | None = None) -> None:
        super().__init__(what)
        self.said = said


def _setting(name: str, default: str) -> str:
    """The environment variable ``name``; unset or empty, ``default``."""
    return os.environ.get(name) or default


_NO_CLIENT = "AGENTGATE_OPENAI_BASE_URL is set: install the client with `pip install langchain-openai`"


def _misconfigured(message: str) -> NoReturn:
    """End the example on a setting it cannot use: one line, status 2, before any model call."""
    print(message, file=sys.stderr)
    sys.exit(2)


@dataclass(frozen=True)
class EndpointSettings:
    """The OpenAI-compatible endpoint the environment names, as the examples use it."""

    base_url: str
    model: str | None
    """``AGENTGATE_OPENAI_MODEL``; ``None`` where unset: each model is asked for by its own name."""
    api_key: str
    timeout: float
    """Seconds a try waits for the endpoint's answer (``AGENTGATE_OPENAI_TIMEOUT``, default 60)."""
    retries: int
    """Tries after a failed first one (``AGENTGATE_OPENAI_MAX_RETRIES``, default 2): after a
    connection error, no answer in time, 408, 409, 429 (waiting as ``Retry-After`` says) or 5xx."""

    def served(self, name: str) -> str:
        """The name the endpoint is asked for in place of the example's model ``name``."""
        return self.model or name

    def describe(self, name: str) -> str:
        """One line naming the endpoint, the model asked for and how long a call may take."""
        return (
            f"Model calls served by {self.base_url} (model {self.served(name)!r}, "
            f"timeout {self.timeout:g} s, max retries {self.retries})"
        )


MAX_TIMEOUT_S = 86_400
"""The longest ``AGENTGATE_OPENAI_TIMEOUT`` taken: a day per try."""

MAX_RETRIES = 100
"""The most ``AGENTGATE_OPENAI_MAX_RETRIES`` taken."""

# How the two settings are spelled: ASCII digits (with a decimal point for seconds), as the command
# line reads --limit and --older-than seconds. float and int also read 1_0, padding, a sign, an
# exponent and other scripts' digits (an Arabic-Indic 3 as 3), which agentgate refuses everywhere
# else (until review R88 the examples took them).
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
_WHOLE = re.compile(r"[0-9]+", re.ASCII)


def _base_url_fault(url: str) -> str | None:
    """What keeps ``url`` from being a base URL the client can call, as a person reads it after
    "is not an http(s) URL"; ``None`` where it is one: http or https, a host, a port 1 to 65535
    where it names one, no white space or control character in it, and a URL the openai client
    takes (``_client_url_fault``). Until review R85 only the prefix was checked:
    ``http://[::1/v1`` failed the first model call with a traceback after the store was made, and
    ``http://`` (no host) as an endpoint nobody listens at."""
    if url != url.strip():
        return "white space around it: an env file saved with CRLF endings adds a \\r"
    if any(character.isspace() or not character.isprintable() for character in url):
        return "white space or a control character in it"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as error:  # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        return str(error)
    if parts.scheme not in ("http", "https") or not url.startswith(f"{parts.scheme}://"):
        return "it starts with neither http:// nor https://"
    if not parts.hostname:
        return "no host in it"
    if port == 0:
        return "port 0 in it"
    return _client_url_fault(url)


def _client_url_fault(url: str) -> str | None:
    """What the openai client says of ``url`` as a base URL, where it refuses it: the client is
    made with it and the URL of a chat completion joined to it, as the model's first call does.
    Its HTTP library parses hosts more strictly than ``urllib``: until review R85b
    ``http://256.1.1.1/v1``, ``http://[v1.fe]/v1`` or ``http://exa\u0308mple..com/v1`` passed
    the check and failed that first call with an ``InvalidURL`` traceback after the store was
    made. ``None`` where the client is not installed: ``endpoint_settings`` says so next."""
    if importlib.util.find_spec("openai") is None:
        return None
    import httpx2  # the openai client's HTTP library
    import openai

    try:
        client = openai.OpenAI(base_url=url, api_key="-", max_retries=0)
        try:
            client.base_url.join("chat/completions").host  # noqa: B018  # IDNA read here
        finally:
            client.close()
    except (httpx2.InvalidURL, ValueError) as error:  # UnicodeError is a ValueError
        return f"the openai client refuses it: {_short(str(error), 200)}"
    return None


_CREDENTIALS = re.compile(r"([^/?#]*//)[^/?#]*@")
"""A URL whose authority (after its first ``//``, up to its path) holds ``user:password@``: what
HTTP clients read as credentials. agentgate's backend inventory refuses such a URL (docs/dispatch.md)
as HTTP clients log it; the examples print the base URL in their banner and every stop line, and
until review R87 printed the password in it."""


def _api_key_fault(key: str) -> str | None:
    """What keeps ``key`` from being sent as ``Authorization: Bearer``, as a person reads it after
    "AGENTGATE_OPENAI_API_KEY", never quoting it; ``None`` where it can be sent: printable ASCII with
    no white space, as agentgate's backend inventory takes a key. Until review R87 the key was not
    checked: one ending in the \\r of an env file saved with CRLF endings stopped the first model
    call as an endpoint nobody listens at ("Connection error."), after the store was made, and a
    non-ASCII one with a bare ``UnicodeEncodeError``."""
    at = next((i for i, c in enumerate(key) if not " " < c < "\x7f"), None)
    if at is None:
        return None
    crlf = "; an env file saved with CRLF endings adds a \\r" if key.endswith("\r") else ""
    return (
        "holds whitespace, control or non-ASCII characters, which an Authorization header cannot "
        f"carry (the first at character {at + 1} of {len(key)}{crlf})"
    )


def endpoint_settings() -> EndpointSettings | None:
    """The endpoint named by ``AGENTGATE_OPENAI_*``; ``None`` where no base URL is set (offline).
    A setting it cannot use ends the example with one line saying which, and status 2."""
    base_url = os.environ.get("AGENTGATE_OPENAI_BASE_URL")
    if not base_url:
        return None
    if _CREDENTIALS.match(base_url):
        without = _CREDENTIALS.sub(r"\1***@", base_url, count=1)
        _misconfigured(
            f"AGENTGATE_OPENAI_BASE_URL={quoted(without, 200)} "
            "carries credentials (user:password@), which the example would print with every line "
            "naming the endpoint: give the key as AGENTGATE_OPENAI_API_KEY (sent as a header)"
        )
    fault = _base_url_fault(base_url)
    if fault is not None:
        _misconfigured(
            f"AGENTGATE_OPENAI_BASE_URL={base_url!r} is not an http(s) URL ({fault}), "
            "e.g. http://127.0.0.1:8000/v1"
        )
    timeout_text = _setting("AGENTGATE_OPENAI_TIMEOUT", "60")
    timeout = float(timeout_text) if _SECONDS.fullmatch(timeout_text) else math.nan
    # At most a day: until review R82 any finite number was taken, and one past what the
    # platform's clocks hold (1e10) failed every model call, blamed on the endpoint.
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        _misconfigured(
            f"AGENTGATE_OPENAI_TIMEOUT={timeout_text!r} is not a number of seconds above 0, "
            f"at most {MAX_TIMEOUT_S} (a day)"
        )
    retries_text = _setting("AGENTGATE_OPENAI_MAX_RETRIES", "2")
    # A number of more digits than MAX_RETRIES is out of range unread (int refuses one of 4,301),
    # and leading zeros are read off first, however many there are.
    significant = retries_text.lstrip("0")
    whole = _WHOLE.fullmatch(retries_text) and len(significant) <= len(str(MAX_RETRIES))
    retries = int(significant or "0") if whole else -1
    # At most 100: until review R85 any whole number was taken, and a huge one retried an
    # endpoint nobody listens at for good.
    if not 0 <= retries <= MAX_RETRIES:
        _misconfigured(
            f"AGENTGATE_OPENAI_MAX_RETRIES={retries_text!r} is not a whole number from 0 to {MAX_RETRIES}"
        )
    api_key = _setting("AGENTGATE_OPENAI_API_KEY", "not-needed")
    fault = _api_key_fault(api_key)
    if fault is not None:
        _misconfigured(f"AGENTGATE_OPENAI_API_KEY {fault}: set it to the key alone (its value is not shown)")
    if importlib.util.find_spec("langchain_openai") is None:
        _misconfigured(_NO_CLIENT)
    return EndpointSettings(
        base_url=base_url,
        model=os.environ.get("AGENTGATE_OPENAI_MODEL") or None,
        # An empty key counts as none: the client refuses an empty one when made ("Missing credentials").
        api_key=api_key,
        timeout=timeout,
        retries=retries,
    )


class EndpointClients:
    """The HTTP clients one run's endpoint models talk through: made for that run, closed as it
    ends. langchain-openai otherwise keeps one client per base URL for the whole process, the
    async one bound to the event loop of the run that first used it, so that a second run in the
    same process (a notebook, a test importing the example) stopped with "Event loop is closed"."""

    def __init__(self) -> None:
        self._sync: list[Any] = []
        self._async: list[Any] = []

    def pair(self) -> dict[str, Any]:
        """A fresh sync and async client for one model (``ChatOpenAI``'s ``http_client`` and
        ``http_async_client``), with the openai client's own defaults."""
        import openai

        self._sync.append(openai.DefaultHttpxClient())
        self._async.append(openai.DefaultAsyncHttpxClient())
        return {"http_client": self._sync[-1], "http_async_client": self._async[-1]}

    def close(self) -> None:
        """Close the clients of a run that called its models synchronously: the async ones it
        never opened hold no connection. A run that awaited them awaits ``aclose`` instead."""
        for client in self._sync:
            client.close()

    async def aclose(self) -> None:
        """Close every client, in the event loop of the run that used them."""
        self.close()
        for client in self._async:
            await client.aclose()


def chat_model(
    turns: Sequence[AIMessage],
    *,
    name: str,
    served_by: Gate | None = None,
    clients: EndpointClients | None = None,
) -> BaseChatModel:
    """The scripted model, or the OpenAI-compatible endpoint named by the environment, whose
    failures raise ``EndpointFailed``; it talks to the endpoint through ``clients`` (which the run
    closes), or where none are given through langchain-openai's clients kept for the process."""
    endpoint = endpoint_settings()
    if endpoint is None:
        return ScriptedChatModel(turns=list(turns), model_name=name, served_by=served_by)
    try:
        from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]
    except ImportError:  # endpoint_settings found it: only a broken install is left here
        _misconfigured(_NO_CLIENT)
    served = endpoint.served(name)

    def failed(error: Exception) -> EndpointFailed:
        return EndpointFailed(_endpoint_trouble(error, endpoint, served))

    class EndpointChatModel(ChatOpenAI):  # type: ignore[misc]
        """``ChatOpenAI`` whose every failure is one ``EndpointFailed`` saying what to check:
        the client's own errors, and those of parsing an answer that is no chat completion.
        Tool-call arguments that are JSON but no object are kept apart, as LangChain keeps
        arguments that are no JSON (``invalid_tool_calls``): neither is run (the middleware records
        each as refused)."""

        def _create_chat_result(self, response: Any, generation_info: Any = None) -> Any:
            response, apart = _as_langchain_reads_it(response)
            result = super()._create_chat_result(response, generation_info)
            for generation, calls in zip(result.generations, apart, strict=False):
                generation.message.invalid_tool_calls.extend(calls)
            return result

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super()._generate(*args, **kwargs)
            except Exception as error:
                raise failed(error) from error

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super()._agenerate(*args, **kwargs)
            except Exception as error:
                raise failed(error) from error

        def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from super()._stream(*args, **kwargs)
            except Exception as error:
                raise failed(error) from error

        async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            try:
                async for chunk in super()._astream(*args, **kwargs):
                    yield chunk
            except Exception as error:
                raise failed(error) from error

    model: BaseChatModel = EndpointChatModel(
        base_url=endpoint.base_url,
        model=served,
        api_key=endpoint.api_key,
        temperature=0,
        timeout=endpoint.timeout,
        max_retries=endpoint.retries,
        **(clients.pair() if clients is not None else {}),
    )
    return model


def _as_langchain_reads_it(response: Any) -> tuple[Any, list[list[Any]]]:
    """The chat completion ``response`` as LangChain can read it, and per choice the tool calls
    set apart as its invalid tool calls: those whose arguments are JSON but no object (``[1, 2]``,
    ``"x"``, ``40``), sent as a string of it or as itself. Arguments sent as an object itself, not
    as a string of its JSON, are read as that string. An answer whose ``choices`` are null or empty,
    or that is an error object, raises ``_UnusableAnswer``.

    LangChain fails the whole answer on the former (a ``ValidationError``), and on the latter with
    an ``IndexError`` or its own words; arguments that are no JSON it keeps apart itself, and those
    that are empty or JSON that is false (``null``, ``[]``, ``0``) it reads as no arguments."""
    import openai

    answer = response.model_dump(warnings=False) if isinstance(response, openai.BaseModel) else response
    if not isinstance(answer, dict):
        return response, []  # no JSON object: LangChain says so
    if error := answer.get("error"):
        said = error.get("message") if isinstance(error, dict) else None
        raise _UnusableAnswer("failed the model call", said=str(said or error))
    if "choices" in answer and not answer["choices"]:
        which = "null" if answer["choices"] is None else "empty"
        raise _UnusableAnswer(f"answered no message (its choices are {which})")
    if not isinstance(answer.get("choices"), list):
        return response, []  # LangChain names what is missing
    apart: list[list[Any]] = []
    changed = False
    for choice in answer["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("tool_calls"), list):
            apart.append([])
            continue
        kept, set_apart = [], []
        for raw in message["tool_calls"]:
            function = raw.get("function") if isinstance(raw, dict) else None
            if not isinstance(function, dict):
                kept.append(raw)  # no call LangChain can read: it fails the answer, saying so
                continue
            arguments = function.get("arguments")
            if isinstance(arguments, dict):
                function["arguments"] = json.dumps(arguments)
                changed = True
                kept.append(raw)
                continue
            try:  # read as LangChain reads them
                parsed = json.loads(arguments, strict=False) if isinstance(arguments, str) else arguments
            except ValueError:
                parsed = {}  # no JSON: LangChain keeps it apart itself
            if isinstance(parsed, dict) or not parsed:  # LangChain reads null, [], 0 as no arguments
                kept.append(raw)
                continue
            set_apart.append(
                invalid_tool_call(
                    name=function.get("name"),
                    args=arguments if isinstance(arguments, str) else json.dumps(arguments),
                    id=raw.get("id"),
                    error=f"the arguments are JSON but no object: {type(parsed).__name__}",
                )
            )
        if set_apart:
            changed = True
            message["tool_calls"] = kept or None
        apart.append(set_apart)
    return (answer if changed else response), apart


def _endpoint_trouble(error: Exception, endpoint: EndpointSettings, model: str) -> str:
    """What a person reads when a model call to the endpoint failed with ``error``: one line
    naming the endpoint (``AGENTGATE_OPENAI_BASE_URL=...``) and what to check, the server's own
    words in it cut short (a proxy's error page is many lines of HTML)."""
    import openai

    base_url, api_key = endpoint.base_url, endpoint.api_key
    at = f"AGENTGATE_OPENAI_BASE_URL={base_url}"
    if isinstance(error, openai.APITimeoutError):
        return (
            f"the endpoint AGENTGATE_OPENAI_BASE_URL={base_url} did not answer within "
            f"AGENTGATE_OPENAI_TIMEOUT={endpoint.timeout:g} s ({endpoint.retries + 1} tries): is it "
            "overloaded, or still loading the model? A slow endpoint needs a larger AGENTGATE_OPENAI_TIMEOUT"
        )
    if isinstance(error, openai.APIConnectionError):
        return f"cannot reach the endpoint {at} ({_said(error, api_key)}): is the server running there?"
    if isinstance(error, openai.AuthenticationError | openai.PermissionDeniedError):
        return (
            f"the endpoint refused the request ({_said(error, api_key)}) at {at}: set AGENTGATE_OPENAI_API_KEY "
            "to a key it accepts"
        )
    if isinstance(error, openai.NotFoundError):
        served = _served_models(base_url, api_key)
        if served is None:
            # The usual slips: the version left out, or the whole endpoint's URL pasted.
            base = base_url.rstrip("/")
            guesses = [base.removesuffix("/chat/completions"), base + "/v1"]
            right = next(
                (url for url in guesses if url != base and _served_models(url, api_key) is not None), None
            )
            hint = (
                f"set AGENTGATE_OPENAI_BASE_URL={right}, where the endpoint lists its models"
                if right is not None
                else "the URL ends with the API's version, e.g. http://127.0.0.1:8000/v1 for vLLM or llama.cpp"
            )
            return (
                f"no OpenAI-compatible API at {at} ({_said(error, api_key)}; GET /models fails too): {hint}"
            )
        if model not in served:
            listed = ", ".join(_words(each, api_key, 80) for each in served[:_LISTED]) + (
                f" and {len(served) - _LISTED} more" if served[_LISTED:] else ""
            )
            return (
                f"the endpoint does not serve AGENTGATE_OPENAI_MODEL={model!r} ({_said(error, api_key)}) at {at}: "
                f"set AGENTGATE_OPENAI_MODEL to one it serves: {listed or 'none'}"
            )
    if isinstance(error, openai.APIStatusError):
        return f"the endpoint failed the model call ({_said(error, api_key)}) at {at}: the server's log there says why"
    if isinstance(error, json.JSONDecodeError | openai.APIResponseValidationError):
        return (
            f"the endpoint's answer is not an OpenAI chat completion ({type(error).__name__}: "
            f"{_words(str(error), api_key)}) at {at}: is an OpenAI-compatible server there?"
        )
    if isinstance(error, _UnusableAnswer):
        said = "" if error.said is None else f" (its answer is an error: {_words(error.said, api_key)})"
        return f"the endpoint {error}{said} at {at}: the server's log there says why"
    return (
        f"the model call to the endpoint {at} failed ({type(error).__name__}: {_words(str(error), api_key)})"
    )


_LISTED = 5
"""The most models a refusal of the model names: a hosted endpoint may list hundreds."""


def _said(error: Any, api_key: str) -> str:
    """The client's message for ``error`` (the status and the server's words), as ``_words``."""
    return _words(str(error.message), api_key, 200)


_READ = 16_384
"""The most characters of what an endpoint said that ``_words`` reads (its white space folded):
a line shows at most 200 of them, and a proxy's error page may be megabytes."""


def _words(text: str, api_key: str, width: int = 86) -> str:
    """What the endpoint said, ``text``, on one line cut to ``width`` (``_short``), ``api_key``
    in it, whole or a piece of it, as ``[redacted]``: an endpoint that refuses a key may quote it
    ("Incorrect API key provided: sk-..."), and until review R87 the examples printed it whole,
    where agentgate's backend client scrubs it from a backend's words the same way (``_scrub``).

    Of a longer text only the first ``_READ`` characters are scrubbed (until review R87b all of
    a 10 MB page was, a character at a time: 1.7 s), where what is shown stands before what the
    key's last characters before that cut became: a piece of the key the cut splits, seen only in
    part, may be too short to be found. Where it does not (the first ``_READ`` characters are the
    key, again and again, each run of it now one marker), all of ``text`` is scrubbed."""
    folded = " ".join(text.split(maxsplit=_READ)[:_READ])  # past _READ where it has more words
    if len(folded) > _READ:
        scrubbed = _scrub(folded[:_READ], api_key)
        # What the key's characters before the cut became: each kept, or a marker for a run of 8
        # or more of them (the first run may hold one only).
        tail = len(api_key) + len("[redacted]") * (2 + len(api_key) // 8)
        if len(scrubbed) >= width + tail:
            return _short(scrubbed, width)
        folded = " ".join(text.split())
    return _short(_scrub(folded, api_key), width)


def _served_models(base_url: str, api_key: str) -> list[str] | None:
    """The model ids the endpoint lists at ``GET /models``; ``None`` where it lists none."""
    request = urllib.request.Request(
        base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {api_key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return [str(each["id"]) for each in json.load(response)["data"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def exit_with(run: Callable[[], int]) -> NoReturn:
    """Run the example (``run`` returns its exit status) and exit with that status. A reader that
    went away (``| head``) ends it with 141, as a command killed by SIGPIPE shows in a shell, and
    Ctrl-C with one line and 130: never a traceback. During ``run`` Ctrl-C is a
    ``KeyboardInterrupt``, so that the run's ``finally`` closes its gate and store; before and
    after it, it ends the process at once (``_interrupt``)."""
    _interrupt.inside_the_run()
    try:
        status = run()
        sys.stdout.flush()  # a dead pipe shows here, not as Python exits
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is left goes nowhere
        sys.exit(141)
    except KeyboardInterrupt:
        _interrupt.outside_the_run()
        _interrupt.say_interrupted()
        sys.exit(130)
    finally:
        _interrupt.outside_the_run()
    sys.exit(status)


def run_ending(messages: Sequence[BaseMessage]) -> str:
    """How a run ended, as a person reads it: the model's last text (and whether the endpoint cut
    it at its token limit), and the tool calls it asked for whose arguments are no JSON object
    (LangChain's ``invalid_tool_calls``): these never reach the tools, so they were not run (the
    middleware records each as refused, review R68), and an answer holding only such calls ends
    the run."""
    last = messages[-1]
    if last.response_metadata.get(STOP_KEY):  # the middleware's answer, not the model's
        said = f"agentgate ended it, as no later call could be allowed:\n  {readable(last.text, WIDTH - 2)}"
    else:
        said = f"the model said: {_short(last.text, 70) if last.text.strip() else '(no text)'}"
    if last.response_metadata.get("finish_reason") == "length":
        said += "\n  the endpoint cut the model's last answer at its token limit (finish_reason length)"
    invalid: list[Mapping[str, Any]] = [
        each for message in messages for each in (getattr(message, "invalid_tool_calls", None) or [])
    ]
    if not invalid:
        return said
    asked = "; ".join(
        f"{_short(str(each.get('name') or '?'), 30)} {_short(str(each.get('args')), 30)}" for each in invalid
    )
    return (
        f"{said}\n  the model asked for {len(invalid)} tool call(s) whose arguments are no JSON "
        f"object, refused, not run: {asked}"
    )


def sign_pending(
    gate: Gate, pending: Iterable[Any], approver: SigningKey, describe: Callable[[dict[str, Any]], str]
) -> dict[str, Any]:
    """Print each approval request a paused run holds (``describe``) and sign it as ``approver``:
    the resume value, by interrupt id (several gated calls at once are several interrupts)."""
    approvals = {}
    for each in pending:
        for line in describe(each.value["request"]).split("\n"):
            print(line if len(line) <= WIDTH else line[: WIDTH - 1] + "…")
        approvals[each.id] = gate.approve(each.value, approver)
    return approvals


def calls(*items: tuple[str, dict[str, Any]], say: str = "") -> AIMessage:
    """One scripted model turn asking for these tool calls (run in parallel)."""
    return AIMessage(
        content=say,
        tool_calls=[{"name": n, "args": a, "id": f"{n}-{abs(hash(repr(a))) % 10**8}"} for n, a in items],
    )


# --- the one-screen summary -----------------------------------------------------------------


WIDTH = 100
"""The columns the examples' output fits in: each line is cut to it, with an ellipsis."""

_RULE = re.compile(r"(?:allowed by )?role \S+ rule \d+: .*?\(line (\d+)\):? ?")


def readable(text: str, width: int = 86) -> str:
    """A refusal as a person reads it: the policy rule named by its line, cut to ``width``."""
    text = re.sub(r"^agentgate refused \S+ \(\w+\): ", "refused: ", text)
    return _short(_RULE.sub(r"policy line \1: ", text), width)


def fitted(text: str) -> str:
    """``text`` with each line wrapped to ``WIDTH``, the lines it adds indented two spaces more
    than the line they continue: what the examples print whole rather than cut, such as why a run
    stopped (naming the endpoint's URL and what to check) and the endpoint it talks to."""
    out = []
    for line in text.split("\n"):
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ", break_on_hyphens=False) or [line]
    return "\n".join(out)


def _short(text: str, width: int = 86) -> str:
    """``text`` on one line of at most ``width`` characters (cut with an ellipsis): its white space
    folded, and each other character that is not printable written as its backslash escape
    (``agentgate._shown.escaped``). What an endpoint says (the model's text, the server's words)
    reaches the terminal only so: until review R87 an escape sequence in it was printed as it was,
    and could retitle the window or clear the screen over the run's refusals."""
    text = escaped(" ".join(text.split()))
    return text if len(text) <= width else text[: width - 1] + "…"


def _row(start: str, rest: str, end: str = "") -> str:
    """``start``, then ``rest`` cut so that the line, ``end`` included, fits in ``WIDTH``."""
    return f"{start}{_short(rest, max(WIDTH - len(start) - len(end), 10))}{end}"


def _column(values: Iterable[str]) -> int:
    """The width of a column holding ``values``."""
    return max((len(value) for value in values), default=0)


def _resource(entry: Any) -> str:
    """The audit entry's resource as a column of the summary shows it: a tool's name is the model's
    choice, each character that is not printable escaped (until review R87 written raw)."""
    return escaped(entry.resource or "")


def summary(
    gate: Gate,
    identities: Iterable[AgentIdentity],
    *,
    peaks: dict[str, int] | None = None,
    store: Path,
    names: dict[str, str] | None = None,
) -> None:
    """Print what was allowed, denied, approved, scheduled and spent, the delegation tree, and
    whether the audit log verifies."""
    people = {**(names or {}), **{i.did: i.name for i in identities}}
    for _, child in gate.delegations:
        people[child.did] = child.name
    gate.flush()
    entries = list(gate.audit.entries())
    tally: Counter[tuple[str, str]] = Counter()
    for e in entries:
        kind = "model" if (e.resource or "").startswith("model:") else e.kind
        if e.kind in ("allow", "deny", "approval_required") and not (e.resource or "").startswith("agent:"):
            tally[(people.get(e.principal, e.principal[:16]), kind)] += 1
    print("\nDecisions per agent (tool calls; model calls):")
    agents = list(dict.fromkeys(name for name, _ in tally))
    width = _column(agents)
    for who in agents:
        print(
            f"  {who:<{width}} {tally[(who, 'allow')]:>3} allowed {tally[(who, 'deny')]:>3} denied"
            f" {tally[(who, 'approval_required')]:>3} approval asked; {tally[(who, 'model')]:>3} model calls"
        )
    if not tally:
        print("  (none)")
    print("\nRefused, and why:")
    refused = [e for e in entries if e.kind == "deny"]
    index, who_width, resource = (
        _column(f"#{e.index}" for e in refused),
        _column(people.get(e.principal, "?") for e in refused),
        _column(_resource(e) for e in refused),
    )
    for e in refused:
        who = people.get(e.principal, "?")
        why = _RULE.sub(
            r"policy line \1: ", "; ".join(r for r in e.reasons if not r.startswith("approval gate"))
        )
        print(_row(f"  {f'#{e.index}':<{index}}  {who:<{who_width}}  {_resource(e):<{resource}}  ", why))
    if not refused:
        print("  (none)")
    approved = [e for e in entries if e.kind == "allow" and e.approver]
    print("\nApproved by a human:")
    index, resource = _column(f"#{e.index}" for e in approved), _column(_resource(e) for e in approved)
    for e in approved:
        by = f" approved by {people.get(e.approver or '', e.approver)}"
        print(_row(f"  {f'#{e.index}':<{index}}  {_resource(e):<{resource}} ", str(e.args), by))
    if not approved:
        print("  (none)")
    # A sub-agent's failure reaches its supervisor's model as a tool answer, not the person
    # running the example: the log's outcomes say which allowed calls did not end well.
    failed = [e for e in entries if e.kind == "outcome" and e.status not in (None, "ok")]
    if failed:
        print("\nAllowed, but did not end ok:")
        index, who_width, resource = (
            _column(f"#{e.index}" for e in failed),
            _column(people.get(e.principal, "?") for e in failed),
            _column(_resource(e) for e in failed),
        )
        for e in failed:
            who = people.get(e.principal, "?")
            start = f"  {f'#{e.index}':<{index}}  {who:<{who_width}}  {_resource(e):<{resource}}  "
            print(_row(start, f"{e.status}: {'; '.join(e.reasons)}"))
    if peaks:
        print("\nScheduled (peak concurrent calls / policy limit):")
        width = _column(peaks)
        for tool, peak in sorted(peaks.items()):
            spec = gate.policy.document.tools.get(tool)
            limit = spec.concurrency if spec and spec.concurrency else "none"
            print(f"  {tool:<{width}}  peak {peak:<3} limit {limit}")
    print("\nSpent (committed, against each grant's budget):")
    budgets = {
        link.id: (people.get(link.audience, link.audience[:16]), link.budget)
        for identity in [*identities, *(child for _, child in gate.delegations)]
        for link in identity.chain.links
        if link.budget is not None
    }
    width = _column(holder for holder, _ in budgets.values())
    for key, (holder, budget) in budgets.items():
        print(
            f"  grant {key[:10]} of {holder:<{width}} {gate.ledger.spent(key):>9} of "
            f"{budget.amount:>10} {budget.unit}"
        )
    if gate.delegations:
        print("\nDelegation tree:")
        for parent, child in gate.delegations:
            tip = child.chain.tip
            caps = "; ".join(
                c.resource + "".join(f" {name} {constraint}" for name, constraint in c.constraints)
                for c in tip.capabilities
            )
            life = tip.expires - tip.not_before
            print(f"  {parent} -> {child.name}: grant {tip.id[:10]}, {life}s, budget {tip.budget}")
            print(_row("      ", caps))
    report = gate.verify()
    ok = report.first_bad_index is None and not report.problems
    print(
        f"\nAudit log: {report.size} entries, signed checkpoint, "
        f"{'VERIFIES' if ok else 'DOES NOT VERIFY: ' + '; '.join(report.problems)}"
    )
    # The installed command, wherever it was installed (docs/cli.md: `python -m agentgate` is the
    # same command where the script is not on PATH).
    print("  check it yourself (python -m agentgate in place of agentgate, where it is not on PATH):")
    print(f"    AGENTGATE_STORE={shlex.quote(str(store))} agentgate audit verify")
