"""The GPU inventory: nodes, GPUs, the interconnect hierarchy and the inference backends.

An inventory is a YAML file, loaded safely and validated like a policy: unknown fields are
rejected, every reference (a GPU's node, a backend's GPUs) must resolve, and errors are
``InventoryError`` naming ``file:line:column``. The loaded ``Inventory`` is immutable and answers the
topology questions the router and the GPU broker ask (``gpus``, ``domain_of``, ``node_of``,
``rack_of``, ``gpus_in``, ``shared_level``).

Example::

    interconnect:
      hierarchy: [nvlink_domain, node, rack]      # innermost first
    racks: [{name: rack-1}]
    nodes:
      - {name: node-a, rack: rack-1}
    gpus:
      - {id: a0, type: H100, memory_gb: 80, node: node-a, nvlink_domain: nvl-a}
    backends:
      - name: vllm-a
        url: http://10.0.0.1:8000
        engine: vllm
        models: [llama-3.1-8b]
        gpus: [a0]
        max_concurrency: 256
        metrics_url: http://10.0.0.1:8000/metrics
        kv_capacity_tokens: 400000
        cost: {input_per_mtok: 150000, output_per_mtok: 600000}
        api_key_env: VLLM_API_KEY                  # or api_key_file: /run/secrets/vllm

A backend's API key is never written in the inventory: ``api_key_env`` names the environment
variable and ``api_key_file`` the file (mode 0600) that holds it, and it is read when the
inventory is loaded. The key is kept out of every ``repr``, ``str`` and dump of the inventory;
``Backend.api_key`` hands it to the HTTP clients, which send it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import stat
import string
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from agentgate._names import first_non_ascii
from agentgate._yaml import Locations, Mark, dotted_path, load_yaml, mark_at, read_source, shortened
from agentgate.capabilities import canonical_resource
from agentgate.errors import BackendCredentialError, CapabilityError, InputError, InventoryError
from agentgate.keys import read_regular_file, shown_path, unsafe_directory

MAX_KV_CAPACITY_TOKENS = 10**12
"""The largest KV cache size believed (a trillion tokens: thousands of times any real engine's);
the router multiplies it with floats, so an unbounded one could overflow every routed call."""

Engine = Literal["vllm", "sglang", "tgi", "llamacpp", "openai"]
"""The inference engines whose metrics agentgate reads; ``openai`` is any OpenAI-compatible server."""

Level = Literal["nvlink_domain", "node", "rack"]
"""A level of the interconnect hierarchy."""

_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$"
_URL = r"^https?://[^\s]+$"
_HEALTH_PATH = r"^/[A-Za-z0-9._~/-]{0,255}$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_PATTERNS_SAID = {
    _NAME: "1 to 128 letters, digits and . _ : / -, starting with a letter or a digit",
    _URL: "an http:// or https:// URL with no white space",
    _HEALTH_PATH: "a path starting with /, of letters, digits and . _ ~ / - (at most 256 characters)",
    _ENV_NAME: "an environment variable's name: letters, digits and _, not starting with a digit",
}
"""Each field pattern of the inventory said in words, for its error (pydantic quotes the regex)."""

_QUERY_IS_LOGGED = (
    "a query string or fragment (?... or #...), which would be logged with every call: give the "
    "backend's key as api_key_env or api_key_file (sent as a header)"
)
"""Why a ``url``, ``metrics_url`` or ``health_path`` holding ``?`` or ``#`` is refused: some hosted
endpoints take their key as ``?key=...``, and HTTP clients log the URL they call."""

MAX_API_KEY_FILE_BYTES = 8192
"""The most an ``api_key_file`` may hold: API keys are tens to a few hundred characters."""


class _Frozen(BaseModel):
    # Numbers are strict (their fields say so): YAML's true is no 1 GB of memory or concurrency
    # 1, and "80" in quotes is text.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=False)


class Rack(_Frozen):
    """A rack: the outermost level of the interconnect hierarchy."""

    name: str = Field(pattern=_NAME)
    """Unique rack name; not ``node:...``, the name of a rackless node's own rack."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        return _unreserved(value, "node:", "a rack name", "rack of a node without one")


class Node(_Frozen):
    """A host with GPUs."""

    name: str = Field(pattern=_NAME)
    """Unique node name."""
    rack: str | None = Field(default=None, pattern=_NAME)
    """The rack the node sits in; ``None`` when racks are not modelled."""


class GPU(_Frozen):
    """One GPU, addressed by a unique id."""

    id: str = Field(pattern=_NAME)
    """Unique GPU id (e.g. ``node-a/0``)."""
    type: str = Field(min_length=1, max_length=64)
    """Model name, e.g. ``H100``, ``H200``, ``A800``: ASCII, and in lower case a resource name
    (letters, digits, ``_`` and ``-``, joined by ``.``), since a lease of it is authorized as
    ``gpu:<type in lower case>``."""
    memory_gb: float = Field(gt=0, le=4096, strict=True, allow_inf_nan=False)
    """Device memory in GB."""
    node: str = Field(pattern=_NAME)
    """The node the GPU is installed in."""
    nvlink_domain: str | None = Field(default=None, pattern=_NAME)
    """The NVLink domain; GPUs in one domain talk over NVLink. ``None``: its own domain. Not
    ``gpu:...``, the name of a lone GPU's own domain."""

    @field_validator("nvlink_domain")
    @classmethod
    def _not_reserved(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return _unreserved(value, "gpu:", "an nvlink domain name", "domain of a GPU without one")

    @model_validator(mode="after")
    def _type_is_a_resource_name(self) -> GPU:
        # A lease of this type is authorized as ``gpu:<type in lower case>`` (``GatedBroker``):
        # a type that makes no resource name could never be leased through the gate, and one that
        # is not ASCII could lower to another's (until review R68 ``\u212a80``, KELVIN SIGN, was
        # ``gpu:k80``).
        where = first_non_ascii(self.type)
        if where is not None:
            raise _RefError(
                ("type",),
                f"GPU {self.id!r} on node {self.node!r}: type {self.type!r} holds {where}: a GPU type "
                "is ASCII (leases are authorized as gpu:TYPE, the type in lower case)",
            )
        try:
            canonical_resource(f"gpu:{self.type.lower()}")
        except CapabilityError as exc:
            raise _RefError(
                ("type",),
                f"GPU {self.id!r} on node {self.node!r}: type {self.type!r} makes no resource name "
                f"(leases are authorized as gpu:TYPE, the type in lower case): {exc}",
            ) from None
        return self


class Interconnect(_Frozen):
    """The interconnect as an ordered hierarchy, innermost (fastest) level first."""

    hierarchy: tuple[Level, ...] = ("nvlink_domain", "node", "rack")
    """Levels innermost first; must be a subsequence-preserving order of nvlink_domain, node, rack.
    Read by ``Inventory.shared_level``; the broker places over all three levels regardless."""
    bandwidth_gbps: dict[Level, Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]] = Field(
        default_factory=dict
    )
    """Optional per-level bandwidth in GB/s. Informational: no routing or placement decision
    reads it (the broker places a gang inside the innermost group that fits, over all three
    levels whatever ``hierarchy`` lists, the order alone deciding); it is checked to agree with
    ``hierarchy`` (it must not grow outward)."""

    @field_validator("hierarchy")
    @classmethod
    def _ordered(cls, value: tuple[Level, ...]) -> tuple[Level, ...]:
        order = ("nvlink_domain", "node", "rack")
        for i in range(1, len(value)):
            if value[i] in value[:i]:
                raise _RefError((i,), "hierarchy levels must be distinct")
            if order.index(value[i]) < order.index(value[i - 1]):
                raise _RefError(
                    (i,),
                    "hierarchy must run from the innermost level out: nvlink_domain, node, rack",
                )
        return value

    @model_validator(mode="after")
    def _bandwidth_falls_outward(self) -> Interconnect:
        """Refuse bandwidths that contradict the hierarchy: placement prefers inner levels as the
        faster ones, so an outer level declared faster than an inner one is a mistake in one of
        the two, which nothing else would notice (the bandwidths are read by nothing)."""
        declared = [
            (level, self.bandwidth_gbps[level]) for level in self.hierarchy if level in self.bandwidth_gbps
        ]
        for (inner, inner_gbps), (outer, outer_gbps) in itertools.pairwise(declared):
            if outer_gbps > inner_gbps:
                raise _RefError(
                    ("bandwidth_gbps", outer),
                    f"bandwidth_gbps of {outer} ({outer_gbps:g}) is above that of {inner} ({inner_gbps:g}), "
                    "an inner level of the hierarchy: placement prefers inner levels as the faster ones",
                )
        return self


MAX_URL_CHARS = 2048
"""The longest ``url`` or ``metrics_url`` (review R63: 100,000 characters loaded, and would have
been sent with every call and probe); 2,048 is what HTTP clients and servers commonly take."""


class BackendCost(_Frozen):
    """Price of a backend's tokens, integer micro-dollars per million tokens (never a float)."""

    # At most 2**63-1, a budget's largest amount, as a policy's model cost (review R63: 10**4299
    # was taken; the router only compares them, but a price no budget could hold is a typo).
    input_per_mtok: int = Field(default=0, ge=0, le=2**63 - 1, strict=True)
    """Micro-dollars per million prompt tokens."""
    output_per_mtok: int = Field(default=0, ge=0, le=2**63 - 1, strict=True)
    """Micro-dollars per million generated tokens."""


class Backend(_Frozen):
    """An OpenAI-compatible inference server running on some of the GPUs."""

    name: str = Field(pattern=_NAME)
    """Unique backend name."""
    url: str = Field(pattern=_URL, max_length=MAX_URL_CHARS)
    """Base URL; ``{url}/v1/chat/completions`` serves requests."""
    engine: Engine = "openai"
    """Which engine runs there; decides which metric names are read."""
    models: tuple[str, ...] = Field(min_length=1)
    """Model names the backend serves: each a resource name as ``model:NAME`` (a call to it is
    authorized as that resource)."""
    gpus: tuple[Annotated[str, Field(pattern=_NAME)], ...] = ()
    """GPU ids the backend runs on."""
    max_concurrency: int = Field(default=256, ge=1, le=1_000_000, strict=True)
    """Most requests the router keeps in flight on this backend."""
    metrics_url: str | None = Field(default=None, pattern=_URL, max_length=MAX_URL_CHARS)
    """Prometheus text endpoint; ``None``: the router relies on its own in-flight accounting."""
    cost: BackendCost = Field(default_factory=BackendCost)
    """Token prices: the router's tie-break among backends about as fast prefers the cheapest
    (``router.Router``; compared, never charged: the policy's model prices are what is charged)."""
    kv_capacity_tokens: int | None = Field(default=None, ge=1, le=MAX_KV_CAPACITY_TOKENS, strict=True)
    """KV cache capacity in tokens; sizes the router's prefix index. ``None``: read it from
    ``vllm:cache_config_info`` when the engine publishes it, else assume 100,000."""
    health_path: str = Field(default="/health", pattern=_HEALTH_PATH)
    """The path the health probe GETs on ``url`` (200: healthy). vLLM, SGLang, TGI and llama.cpp
    serve ``/health``; a hosted OpenAI-compatible endpoint has none: ``/v1/models`` (sent with
    the API key) answers there."""
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    """The environment variable holding the backend's API key (vLLM's or SGLang's ``--api-key``,
    a hosted endpoint's key), read when the inventory is loaded; ``None``: see ``api_key_file``."""
    api_key_file: str | None = Field(default=None, min_length=1, max_length=4096)
    """An absolute path to a file holding the API key (surrounding whitespace stripped), readable
    by its owner only; read when the inventory is loaded. At most one of the two is given."""
    _api_key: SecretStr | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_literal_key(cls, data: Any) -> Any:
        """Refuse ``api_key``: a key written in the inventory would be committed, copied and
        printed with it. The message never holds the value."""
        if isinstance(data, Mapping) and "api_key" in data:
            # Before validation: the name may be of any size or not text at all.
            name = data.get("name")
            backend = f"backend {shortened(name)!r}" if isinstance(name, str) else "the backend"
            raise _RefError(
                ("api_key",),
                f"{backend}: an API key is never written in the inventory; "
                "name where it is read with api_key_env (an environment variable) or "
                "api_key_file (a file readable by its owner only)",
                BackendCredentialError,
            )
        return data

    @model_validator(mode="after")
    def _models_are_resource_names(self) -> Backend:
        # A call is authorized as ``model:<name>`` (the gateway, ``Gate``): a name that makes no
        # resource name (a space in it, an empty one) could never be called, while the gateway
        # listed it in ``/v1/models`` and the backend sat in the inventory as if it served.
        for j, name in enumerate(self.models):
            try:
                canonical = canonical_resource(f"model:{name}")
            except CapabilityError as exc:
                raise _RefError(
                    ("models", j),
                    f"backend {self.name!r}: model {name[:200]!r} makes no resource name (calls are "
                    f"authorized as model:NAME): {exc}",
                ) from None
            if canonical != f"model:{name}":
                raise _RefError(
                    ("models", j),
                    f"backend {self.name!r}: model {name[:200]!r} is not written as its resource "
                    f"name {canonical!r}",
                )
        return self

    @model_validator(mode="after")
    def _read_api_key(self, info: ValidationInfo) -> Backend:
        """Read the API key ``api_key_env`` or ``api_key_file`` names (``_key_from_source``),
        unless the inventory is loaded with ``read_keys=False`` (a view that never calls a
        backend, such as ``agentgate broker inventory``: no key is read, ``api_key`` is None)."""
        if (info.context or {}).get("read_keys", True):
            self._api_key = self._key_from_source()
        elif self.api_key_env is not None and self.api_key_file is not None:
            self._key_from_source()  # the one check that needs no secret: raises
        return self

    def _key_from_source(self) -> SecretStr | None:
        """The API key ``api_key_env`` or ``api_key_file`` names, read now; None when neither is
        given. Raises (as ``_RefError``, which ``inventory_from_mapping`` turns into
        ``BackendCredentialError``) naming the backend and the variable or file, never the value."""
        if self.api_key_env is not None and self.api_key_file is not None:
            raise _RefError(
                ("api_key_file",),
                f"backend {self.name!r}: give api_key_env or api_key_file, not both",
                BackendCredentialError,
            )
        if self.api_key_env is not None:
            field = "api_key_env"
            where = (
                "the environment variable api_key_env names (not shown: the name looks like a key)"
                if _looks_like_a_key(self.api_key_env)
                else f"the environment variable {self.api_key_env}"
            )
            raw = os.environ.get(self.api_key_env)
            if raw is None:
                raise _RefError(
                    (field,), f"backend {self.name!r}: {where} is not set", BackendCredentialError
                )
        elif self.api_key_file is not None:
            where, field = f"the file {shown_path(self.api_key_file)}", "api_key_file"
            raw = _read_key_file(self.name, self.api_key_file)
        else:
            return None
        key = raw.strip()
        if not key:
            raise _RefError((field,), f"backend {self.name!r}: {where} is empty", BackendCredentialError)
        if not all(" " < c < "\x7f" for c in key):
            # An HTTP header value carries printable ASCII: a line break in it would end the header.
            raise _RefError(
                (field,),
                f"backend {self.name!r}: the API key in {where} holds whitespace, control or "
                "non-ASCII characters, which an Authorization header cannot carry",
                BackendCredentialError,
            )
        return SecretStr(key)

    def read_api_key(self) -> SecretStr | None:
        """The backend's API key as its source holds it now (``api_key`` is the one read when the
        inventory was loaded): a key file rotated since is read again. None when no key is
        configured. Raises ``BackendCredentialError`` (naming the backend and the variable or
        file, never the value) when the source cannot be read or holds no usable key."""
        try:
            return self._key_from_source()
        except _RefError as exc:
            raise BackendCredentialError(exc.message) from None

    @property
    def api_key(self) -> SecretStr | None:
        """The API key sent as ``Authorization: Bearer``; ``None`` when none is configured."""
        return self._api_key

    @field_validator("url", "metrics_url")
    @classmethod
    def _usable_url(cls, value: str | None) -> str | None:
        """A URL an HTTP client can use: printable, with a host and a port in range. One that is
        not (a NUL byte, port 99999) used to fail inside the dispatcher's health and scrape loops,
        stopping them for every backend."""
        if value is None:
            return None
        bad = next((c for c in value if not c.isprintable() or c.isspace()), None)
        if bad is not None:
            raise ValueError(f"the URL holds the character {bad!r}")
        # Credentials and a query string are refused before the URL is parsed, whose errors quote
        # its host part whole: until review R94 ``http://admin:SECRET\u2100PW@host`` was refused
        # with its password in the words (urlsplit's NFKC check).
        if "?" in value or "#" in value:  # a bare one too: the chat path would follow it
            # The same for a token in a query string (``/metrics?token=...``); the chat URL is made
            # by appending a path, which a query string would end up behind.
            raise ValueError(f"the URL has {_QUERY_IS_LOGGED}")
        if "@" in value.partition("//")[2].partition("/")[0]:  # urlsplit's netloc, as ? # are out
            # HTTP clients log the URL they call (httpx at INFO): a password in it would be
            # written on every health probe and every call.
            raise ValueError("the URL carries credentials (user:password@), which would be logged")
        try:
            parts = urlsplit(value)
            # ``port`` raises ValueError when it is out of range or not a number
            host = parts.hostname if parts.port is None or parts.port > 0 else None
        except ValueError as exc:  # its words quote the port or host whole: cut, as quotes are
            # A "@" after a "/" may still be a password's end (``admin:pass/word@host``, read as
            # the port "pass"): such words are not quoted.
            said = "its host or port cannot be read" if "@" in value else shortened(str(exc))
            raise ValueError(f"not a usable URL: {said}") from None
        if not host:
            raise ValueError("the URL names no host, or port 0")
        return value

    @field_validator("health_path", mode="before")
    @classmethod
    def _no_query_in_health_path(cls, value: Any) -> Any:
        """Refuse a ``health_path`` holding ``?`` or ``#`` before its pattern is checked, whose
        error quotes the value: a hosted endpoint's key written as ``/v1beta/models?key=...``
        (Gemini's takes one so) was quoted whole, on the terminal and in logs, until review R96.
        The message names the fault, never the value, as for ``url`` and ``metrics_url``."""
        if isinstance(value, str) and ("?" in value or "#" in value):
            raise ValueError(f"the path has {_QUERY_IS_LOGGED}")
        return value

    @field_validator("url")
    @classmethod
    def _a_servers_root(cls, value: str) -> str:
        """The server's root, not an OpenAI SDK's ``base_url``, which ends in ``/v1``: every call
        went to ``.../v1/v1/chat/completions`` (404), every ``/v1/models`` probe failed too, and
        the backend, marked down at its first call, never came back. The path is read as the
        HTTP client sends it and ``engine_key`` spells it (percent-encoded unreserved characters
        decoded, ``.`` and ``..`` segments resolved): until review R86 ``/v1/.`` and ``/%76%31``
        were taken, and their calls went to ``/v1/v1/chat/completions``."""
        path = _without_dot_segments(_decode_unreserved(urlsplit(value).path))
        if path.rstrip("/").lower().endswith("/v1"):
            raise ValueError(
                "the URL ends in /v1: give the server's base URL without it (agentgate adds "
                "/v1/chat/completions to it)"
            )
        return value

    @property
    def chat_url(self) -> str:
        """The chat-completions endpoint."""
        return self.url.rstrip("/") + "/v1/chat/completions"

    @cached_property
    def engine_key(self) -> str:
        """The engine this backend's calls go to (``engine_key`` of ``chat_url``): backends with
        one key are one engine under several names."""
        return engine_key(self.chat_url)


_DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
"""A URL scheme's spelling (RFC 3986, section 3.1), for ``_shown_url``."""


def _shown_url(url: str) -> str:
    """``url`` as an error may quote it: its ``user:password@`` (everything before its last ``@``
    after the scheme, as a password may hold a ``/``, ``?`` or ``#``) shown as ``...@``, then
    what follows its first ``?`` or ``#`` as ``...``; the rest as written. The userinfo goes
    first: until review R94 the URL was cut at a ``?`` or ``#`` first, and the ``@`` behind it
    went with the cut, so ``ftp://admin:PW?x@host`` was quoted ``ftp://admin:PW?...`` (an ``@``
    in a query hides the text before it too, which does no harm). It is not parsed, so that a
    URL no parser takes is shown too; the text before its first ``://`` is its scheme only when it
    reads as one (RFC 3986: a letter, then letters, digits, ``+``, ``-``, ``.``): a ``://`` further
    on (``host:1/v1?next=http://x``, ``http:/user:pw@host/#http://x``) showed all before it, as
    the scheme, until a regression review of R94."""
    scheme, sep, rest = url.partition("://")
    if not sep or _SCHEME.fullmatch(scheme) is None:
        scheme, sep, rest = "", "", url
    if "@" in rest:
        rest = "...@" + rest.rpartition("@")[2]
    cut = min((at for at in (rest.find("?"), rest.find("#")) if at >= 0), default=-1)
    if cut >= 0:
        rest = rest[: cut + 1] + "..."
    return f"{scheme}{sep}{rest}"


def engine_key(url: str) -> str:
    """``url`` spelled so that two URLs of one endpoint are equal (RFC 3986, section 6.2.2): its
    ``origin`` (the scheme and host lower-cased, as DNS and RFC 3986 compare them, an IP address
    written in its shortest form, an IPv4-mapped IPv6 address as its IPv4 one, kept in brackets
    when it is IPv6, an IPv4 address in a form resolvers read (``127.1``, ``0x7f.0.0.1``) dotted,
    with or without one trailing dot, a host name's trailing dot dropped, a non-ASCII name in
    the client's IDNA form (``xn--``), and the port always given: 80 or 443 when ``url`` leaves
    it out), then the path with its percent-encoded unreserved characters decoded
    (``%7E`` is ``~``), other percent-encodings in upper case and its ``.`` and ``..`` segments
    resolved, but otherwise as it is: paths are case-sensitive, and ``/A`` and ``/a`` may be two
    engines behind one proxy. Every comparison of backend URLs goes through it or ``origin``;
    comparing the URLs lower-cased took ``http://h`` and ``http://h:80`` for two engines and
    ``/A`` and ``/a`` for one (review R54), and ``http://[::ffff:127.0.0.1]``, ``http://localhost.``,
    ``/%761`` or ``/x/../v1`` for engines other than ``http://127.0.0.1``, ``http://localhost`` and
    ``/v1`` (review R55), and so were ``http://127.1`` and ``http://Bücher.example`` (review R55)."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}{_without_dot_segments(_decode_unreserved(urlsplit(url).path))}"


def origin(url: str) -> tuple[str, str, int | None]:
    """The scheme, host and port of ``url`` as ``engine_key`` spells them (the port a default one
    spells out; ``None`` for a scheme with none), as a browser compares origins, but for a host
    name's trailing dot and an IPv4-mapped IPv6 address, which name the same host as without."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = _decode_unreserved(parts.hostname or "").lower()
    # One trailing dot makes a name absolute (``localhost.`` is ``localhost``); an address in a
    # form resolvers read is read without it too: ``127.1.``, like ``127.1`` and ``127.0.0.1.``,
    # is ``127.0.0.1`` (review R56: it stayed ``127.1``, another engine).
    bare = host.removesuffix(".") or host
    try:
        number = _inet_aton(bare)
        address = ipaddress.ip_address(host if number is None else number)
    except ValueError:  # a name, not an address
        host = _idna(bare)
    else:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        host = str(mapped or address)
    if ":" in host:
        host = f"[{host}]"
    port = parts.port if parts.port is not None else _DEFAULT_PORTS.get(scheme)
    return scheme, host, port


def _inet_aton(host: str) -> int | None:
    """The IPv4 address ``host`` names in a form ``inet_aton`` and so resolvers read (``127.1``,
    ``0x7f.0.0.1``, ``0177.0.0.1``, ``2130706433``: one to four parts, each decimal, ``0x`` hex or
    ``0`` octal, the last filling the bytes left), or ``None`` when it is none of these."""
    parts = host.split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if part.startswith("0x"):
            base, digits, allowed = 16, part[2:], string.hexdigits
        elif part.startswith("0"):
            base, digits, allowed = 8, part[1:] or "0", string.octdigits
        else:
            base, digits, allowed = 10, part, string.digits
        if not digits or not all(c in allowed for c in digits):
            return None
        numbers.append(int(digits, base))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    return sum(n << (8 * (3 - i)) for i, n in enumerate(head)) + last


def _idna(host: str) -> str:
    """``host`` as the HTTP client sends it (httpx: IDNA 2008, ``bücher.example`` is
    ``xn--bcher-kva.example``), or as it is when it is ASCII or no IDNA name (the client then
    reaches no host at all)."""
    if host.isascii():
        return host
    import httpx  # the client's own encoding; imported here, for the rare host that needs it

    try:
        return httpx.URL(scheme="http", host=host).raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError):
        return host


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
"""The characters that mean the same percent-encoded or not (RFC 3986, section 2.3)."""


def _decode_unreserved(text: str) -> str:
    """``text`` with each percent-encoded unreserved character decoded and every other
    percent-encoding's hex digits in upper case (RFC 3986, sections 6.2.2.1 and 6.2.2.2)."""

    def spelled(escape: re.Match[str]) -> str:
        char = chr(int(escape[1], 16))
        return char if char in _UNRESERVED else escape[0].upper()

    return _ESCAPE.sub(spelled, text)


def _without_dot_segments(path: str) -> str:
    """``path`` with its ``.`` and ``..`` segments resolved (RFC 3986, section 5.2.4; ``..`` at
    the root stays at the root). By hand: the standard library has no public form of it, and
    httpx's drops the slash that ends ``/a/.`` (RFC 3986 keeps it)."""
    if "." not in path:
        return path
    segments = path.split("/")
    kept: list[str] = []
    for segment in segments[1:] if path.startswith("/") else segments:
        if segment == "..":
            if kept:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    if segments[-1] in (".", ".."):
        kept.append("")  # a path that ends in a dot segment names a directory: ``/a/.`` is ``/a/``
    return ("/" if path.startswith("/") else "") + "/".join(kept)


class Inventory(_Frozen):
    """A validated inventory; every cross-reference resolves. Build it with ``load_inventory``."""

    interconnect: Interconnect = Field(default_factory=Interconnect)
    racks: tuple[Rack, ...] = ()
    nodes: tuple[Node, ...] = ()
    gpus: tuple[GPU, ...] = ()
    backends: tuple[Backend, ...] = ()

    @model_validator(mode="after")
    def _references_resolve(self) -> Inventory:
        _unique("racks", "name", [r.name for r in self.racks])
        _unique("nodes", "name", [n.name for n in self.nodes])
        _unique("gpus", "id", [g.id for g in self.gpus])
        _unique("backends", "name", [b.name for b in self.backends])
        racks = {r.name for r in self.racks}
        for i, node in enumerate(self.nodes):
            if node.rack is not None and node.rack not in racks:
                raise _RefError(("nodes", i, "rack"), f"node {node.name!r}: unknown rack {node.rack!r}")
        nodes = {n.name: n for n in self.nodes}
        domain_rack: dict[str, str] = {}
        for i, gpu in enumerate(self.gpus):
            if gpu.node not in nodes:
                raise _RefError(("gpus", i, "node"), f"gpu {gpu.id!r}: unknown node {gpu.node!r}")
            if gpu.nvlink_domain is not None:
                # A node without a rack is its own rack, as ``rack_of`` says: two such nodes are
                # two racks, which one NVLink domain does not span.
                rack = nodes[gpu.node].rack or f"node:{gpu.node}"
                seen = domain_rack.setdefault(gpu.nvlink_domain, rack)
                if seen != rack:
                    raise _RefError(
                        ("gpus", i, "nvlink_domain"),
                        f"gpu {gpu.id!r}: nvlink domain {gpu.nvlink_domain!r} spans racks",
                    )
        gpu_ids = {g.id for g in self.gpus}
        for i, backend in enumerate(self.backends):
            # A set: until review R63 each GPU was looked for in the list before it, quadratic
            # work (a backend listing 22,000 GPUs took 7 s to check).
            listed: set[str] = set()
            for j, gpu_id in enumerate(backend.gpus):
                if gpu_id not in gpu_ids:
                    raise _RefError(
                        ("backends", i, "gpus", j), f"backend {backend.name!r}: unknown gpu {gpu_id!r}"
                    )
                if gpu_id in listed:
                    raise _RefError(
                        ("backends", i, "gpus", j),
                        f"backend {backend.name!r}: gpu {gpu_id!r} is listed twice",
                    )
                listed.add(gpu_id)
        return self

    # --- lookups -------------------------------------------------------------------------

    @cached_property
    def _gpu_by_id(self) -> dict[str, GPU]:
        return {g.id: g for g in self.gpus}

    @cached_property
    def _node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def _backend_by_name(self) -> dict[str, Backend]:
        return {b.name: b for b in self.backends}

    def gpu(self, gpu_id: str) -> GPU:
        """The GPU with this id; raises ``InventoryError`` if there is none."""
        try:
            return self._gpu_by_id[gpu_id]
        except KeyError:
            raise InventoryError(f"unknown gpu {gpu_id!r}") from None

    def node(self, name: str) -> Node:
        """The node with this name; raises ``InventoryError`` if there is none."""
        try:
            return self._node_by_name[name]
        except KeyError:
            raise InventoryError(f"unknown node {name!r}") from None

    def backend(self, name: str) -> Backend:
        """The backend with this name; raises ``InventoryError`` if there is none."""
        try:
            return self._backend_by_name[name]
        except KeyError:
            raise InventoryError(f"unknown backend {name!r}") from None

    def backends_serving(self, model: str) -> tuple[Backend, ...]:
        """Backends that list ``model``, in inventory order."""
        return tuple(b for b in self.backends if model in b.models)

    def domain_of(self, gpu_id: str) -> str:
        """The GPU's NVLink domain; a GPU without one is its own domain (``gpu:<id>``)."""
        gpu = self.gpu(gpu_id)
        return gpu.nvlink_domain if gpu.nvlink_domain is not None else f"gpu:{gpu.id}"

    def node_of(self, gpu_id: str) -> str:
        """The node the GPU is installed in."""
        return self.gpu(gpu_id).node

    def rack_of(self, gpu_id: str) -> str:
        """The GPU's rack; a node without one is its own rack (``node:<name>``)."""
        node = self.node(self.node_of(gpu_id))
        return node.rack if node.rack is not None else f"node:{node.name}"

    def group_of(self, gpu_id: str, level: Level) -> str:
        """The GPU's group at ``level`` of the hierarchy."""
        if level == "nvlink_domain":
            return self.domain_of(gpu_id)
        if level == "node":
            return self.node_of(gpu_id)
        return self.rack_of(gpu_id)

    def gpus_in(self, level: Level, group: str) -> tuple[GPU, ...]:
        """The GPUs whose group at ``level`` is ``group``, in inventory order."""
        return tuple(g for g in self.gpus if self.group_of(g.id, level) == group)

    def groups(self, level: Level) -> dict[str, tuple[GPU, ...]]:
        """Every group at ``level`` with its GPUs, in inventory order."""
        out: dict[str, list[GPU]] = {}
        for g in self.gpus:
            out.setdefault(self.group_of(g.id, level), []).append(g)
        return {k: tuple(v) for k, v in out.items()}

    def shared_level(self, gpu_ids: list[str] | tuple[str, ...]) -> Level | None:
        """The innermost hierarchy level at which all the GPUs share one group, or ``None``."""
        if not gpu_ids:
            return None
        for level in self.interconnect.hierarchy:
            if len({self.group_of(g, level) for g in gpu_ids}) == 1:
                return level
        return None


def _unreserved(value: str, prefix: str, what: str, whose: str) -> str:
    """``value``, unless it starts with ``prefix``, which the inventory reserves for the implicit
    group ``whose`` names (``domain_of``, ``rack_of``): a name that took it could merge two groups
    that the inventory keeps apart. Raises ``ValueError`` naming ``what``."""
    if value.startswith(prefix):
        raise ValueError(f"{what} may not start with {prefix!r}, reserved for the {whose}")
    return value


def _read_key_file(backend: str, path: str) -> str:
    """The text of the API key file ``path``; raises ``_RefError`` (a ``BackendCredentialError``)
    for a relative path, a file that cannot be read (not a regular file, too large: as key files,
    ``keys.read_regular_file``), one readable or writable by group or others (group read is
    allowed when root owns the file), one in a directory others may change (``keys.unsafe_directory``,
    the rule private keys follow: anyone who may rename files there may put their own key in its
    place), or not UTF-8."""
    at = ("api_key_file",)
    if not os.path.isabs(path):
        # Not quoted: a relative "path" is most likely the key itself, pasted in its place.
        raise _RefError(
            at,
            f"backend {backend!r}: api_key_file must be an absolute path (the value given is not "
            "shown: it may be the key itself)",
            BackendCredentialError,
        )
    try:
        data, status = read_regular_file(path, MAX_API_KEY_FILE_BYTES, "an API key", BackendCredentialError)
    except InputError as exc:
        raise _RefError(at, f"backend {backend!r}: {exc}", BackendCredentialError) from None
    mode = status.st_mode
    shown = shown_path(path)  # one line, whatever the name holds
    # libpq's rule for its key files: at most u=rw, or u=rw,g=r when root owns the file (a
    # secret mounted by Kubernetes or Docker, readable by the service's group).
    allowed = stat.S_IRGRP if status.st_uid == 0 else 0
    if mode & (stat.S_IRWXG | stat.S_IRWXO) & ~allowed:
        raise _RefError(
            at,
            f"backend {backend!r}: {shown}: the API key file is accessible by others "
            f"(mode {stat.S_IMODE(mode):04o}); run chmod 600 {shown} (or 640 for a file root owns; "
            "for a mounted secret, set its mode: docs/dispatch.md)",
            BackendCredentialError,
        )
    unsafe = unsafe_directory(Path(path))
    if unsafe is not None:
        raise _RefError(
            at,
            f"backend {backend!r}: {shown}: the API key file is in a directory others may change: {unsafe}",
            BackendCredentialError,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _RefError(
            at, f"backend {backend!r}: {shown}: the API key file is not UTF-8 text", BackendCredentialError
        ) from None


def _looks_like_a_key(name: str) -> bool:
    """True for an ``api_key_env`` value that may be a key pasted in place of a variable's name
    (an alphanumeric key fits the name's pattern): 20 characters or more mixing lower-case letters
    and digits, which conventional names (``VLLM_API_KEY``) do not; errors then do not quote it."""
    return len(name) >= 20 and any(c.islower() for c in name) and any(c.isdigit() for c in name)


class _RefError(ValueError):
    """An inventory error at ``loc`` (relative to the model whose validator raised it), raised as
    ``error``; its message is given after that location's full path, as pydantic's own errors are."""

    def __init__(
        self,
        loc: tuple[str | int, ...],
        message: str,
        error: type[InventoryError] = InventoryError,
    ) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message
        self.error = error


def _unique(kind: str, field: str, names: list[str]) -> None:
    """Refuse a name listed twice in ``kind``, at the repeat's ``field``, naming the first."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise _RefError((kind, i, field), f"duplicate {kind[:-1]} {name!r} (also {kind}.{first[name]})")
        first[name] = i


def parse_inventory(text: str, *, source: str = "<inventory>", read_keys: bool = True) -> Inventory:
    """Parse and validate inventory YAML text; ``read_keys=False`` reads no backend's API key
    (for views that never call a backend).

    Raises ``InventoryError`` with ``source:line:column`` for malformed YAML, unknown or missing fields,
    out-of-range values and references that do not resolve.
    """
    data, lines = load_yaml(
        text, source=source, error=InventoryError, max_nodes=MAX_INVENTORY_NODES, what="an inventory"
    )
    if data is None:
        data = {}
    if not isinstance(data, dict):
        at = lines.of(()) or Mark(1, 1)
        raise InventoryError("the inventory must be a mapping", file=source, line=at.line, column=at.column)
    return inventory_from_mapping(data, source=source, lines=lines, read_keys=read_keys)


def inventory_from_mapping(
    data: Mapping[str, Any],
    *,
    source: str = "<inventory>",
    lines: Locations | None = None,
    read_keys: bool = True,
) -> Inventory:
    """Validate already-parsed inventory data; raises ``InventoryError`` like ``parse_inventory``
    (and for data that is no mapping, which ``dict()`` would refuse with a bare ``TypeError``)."""
    lines = lines or Locations()
    if not isinstance(data, Mapping):
        at = lines.of(())
        raise InventoryError(
            "the inventory must be a mapping",
            file=source,
            line=at.line if at else None,
            column=at.column if at else None,
        )
    try:
        return Inventory.model_validate(dict(data), context={"read_keys": read_keys})
    except _RefError as exc:
        raise _ref_located(source, lines, (), exc) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _RefError):
            raise _ref_located(source, lines, loc, ctx_error) from None
        unknown = err["type"] == "extra_forbidden"
        # pydantic ends the path of a mapping key it refuses (``bandwidth_gbps: {bogus: 1}``)
        # with "[key]": the key is the value at fault, named by its own path, at where it is
        # written (an unknown field's path ends in the field's name, which may be "[key]").
        bad_key = not unknown and loc[-1:] == ("[key]",)
        loc = loc[:-1] if bad_key else loc
        field = dotted_path(loc) or "inventory"
        message = f"{field}: {err['msg'].removeprefix('Value error, ')}"  # pydantic's, for a validator's own
        if unknown:
            message = f"{field}: unknown field"
        elif bad_key:
            message = f"{field}: not a valid key: {err['msg']}"
        elif err["type"] == "string_pattern_mismatch" and (
            said := _PATTERNS_SAID.get((err.get("ctx") or {}).get("pattern", ""))
        ):
            # An api_key_env that is no variable's name is most likely the key itself, pasted in
            # its place (most keys hold a "-": sk-proj-...), so it is not quoted, as a relative
            # api_key_file is not; until review R93 it was, whole, on the terminal and in logs.
            # A URL is quoted without its user:password@, query and fragment (``_shown_url``),
            # which the URL checks refuse as they would be logged: until review R94 a URL with a
            # bad scheme was quoted whole, password or ``?token=`` included.
            given = (
                "the value given (not shown: it may be the key itself)"
                if loc[-1:] == ("api_key_env",)
                else repr(shortened(_shown_url(str(err["input"]))))
                if said == _PATTERNS_SAID[_URL]
                else repr(shortened(str(err["input"])))
            )
            message = f"{field}: {given} must be {said}"
        # A key at fault is located at the key, not at its value (maybe on the line below).
        raise _located(source, lines, loc, message, key=unknown or bad_key) from None


MAX_INVENTORY_BYTES = 8 * 1024 * 1024

MAX_INVENTORY_NODES = 250_000
"""Most YAML nodes an inventory may hold, five times a policy's (``agentgate._yaml.MAX_NODES``):
a GPU written as one mapping takes 11, its share of its node's entry less than 1, so about
21,000 GPUs, loaded in a few seconds; a hostile file just under the limit peaks at about 100 MiB
while it is read. Until review R51 an inventory had the policy's limit of 50,000, and one of
4,600 GPUs (575 nodes of 8) was refused as "an agentgate file holds a few hundred"."""


def load_inventory(path: str | Path, *, read_keys: bool = True) -> Inventory:
    """Load and validate an inventory file (``read_keys`` as ``parse_inventory``); raises
    ``InventoryError`` naming ``file:line:column``, and for a file that is not regular (read like a
    policy: ``read_source``), larger than ``MAX_INVENTORY_BYTES``, or not UTF-8 text."""
    data = read_source(path, InventoryError, limit=MAX_INVENTORY_BYTES, what="inventory")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8")  # what precedes the first bad byte decodes
        at = mark_at(before, len(before))
        raise InventoryError(
            f"cannot read: not UTF-8 text (byte {exc.start})", file=str(path), line=at.line, column=at.column
        ) from None
    return parse_inventory(text, source=str(path), read_keys=read_keys)


def _ref_located(
    source: str, lines: Locations, within: tuple[str | int, ...], exc: _RefError
) -> InventoryError:
    """``exc`` as its error, its message after its value's full path, standing at that value's line
    and column: ``within`` locates the model whose validator raised it, its own ``loc`` is inside."""
    loc = within + exc.loc
    return _located(source, lines, loc, f"{dotted_path(loc)}: {exc.message}", exc.error)


def _located(
    source: str,
    lines: Locations,
    loc: tuple[str | int, ...],
    message: str,
    error: type[InventoryError] = InventoryError,
    *,
    key: bool = False,
) -> InventoryError:
    """``error`` at the line and column where ``loc``'s value starts (its key's, with ``key``), as
    the policy loader locates its errors: ``file:line:column: message``."""
    mark = lines.of(loc, key=key)
    return error(message, file=source, line=mark.line if mark else None, column=mark.column if mark else None)
