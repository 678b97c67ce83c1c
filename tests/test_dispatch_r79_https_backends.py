"""Review R79: an https:// backend is trusted alike by its health probe and by its chat calls.

The chat calls go over aiohttp, which verifies a backend's certificate against the system's trust
store (OpenSSL's default paths, which ``SSL_CERT_FILE`` names); the probes and scrapes went over
httpx with certifi's bundle. A backend whose certificate comes from a private CA the operator
installed (a self-hosted vLLM behind TLS, say) answered every chat call and failed every probe, so
the dispatcher marked it down at its first probe and kept it down. No test had run an https
backend: this one does, in a fresh interpreter whose ``SSL_CERT_FILE`` names the test's own CA
(aiohttp builds its context when imported)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

BACKEND = r"""
import asyncio, json, ssl, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.backends import Timeouts
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed

ANSWER = json.dumps({
    "id": "c1", "object": "chat.completion", "created": 0, "model": "small",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}).encode()

class Backend(BaseHTTPRequestHandler):
    def _answer(self, status, body, kind="application/json"):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer(200 if self.path == "/health" else 404, b"{}")

    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self._answer(200, ANSWER)

    def log_message(self, *args):
        pass

cert, key = sys.argv[1:3]
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
server.socket = tls.wrap_socket(server.socket, server_side=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"https://127.0.0.1:{server.server_address[1]}"

async def main():
    inventory = inventory_from_mapping({"backends": [{"name": "b", "url": url, "engine": "vllm", "models": ["small"]}]})
    timeouts = Timeouts(connect_s=5, first_token_s=5, idle_s=5, answer_max_s=10)
    async with Dispatcher(inventory, Router(inventory), timeouts=timeouts, max_attempts=1) as dispatcher:
        probe = await dispatcher.clients["b"].health()
        try:
            answer = await dispatcher.chat({"model": "small", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        except BackendFailed as exc:
            return {"probe": probe, "failed": str(exc)}
    return {"probe": probe, "answer": answer.content}

print(json.dumps(asyncio.run(main())))
server.shutdown()
"""


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _private_ca(where: Path) -> tuple[Path, Path, Path]:
    """A CA (its certificate the trust store) and a certificate for 127.0.0.1 it signed, with the
    extensions Python 3.13's strict verification asks for (key identifiers, critical CA flag)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    encoding = serialization.Encoding.PEM
    return (
        _pem(where / "ca.pem", ca.public_bytes(encoding)),
        _pem(where / "backend.pem", leaf.public_bytes(encoding)),
        _pem(
            where / "backend.key",
            key.private_bytes(encoding, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        ),
    )


def test_a_backend_behind_a_private_ca_in_the_trust_store_passes_its_probe_and_answers(
    tmp_path: Path,
) -> None:
    ca, cert, key = _private_ca(tmp_path)
    env = {**os.environ, "SSL_CERT_FILE": str(ca)}
    env.pop("SSL_CERT_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", BACKEND, str(cert), str(key)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"probe": True, "answer": "hi"}


def test_a_backend_whose_ca_is_in_no_trust_store_fails_its_probe_and_its_calls(tmp_path: Path) -> None:
    """The same backend, its CA trusted nowhere: its certificate is verified on both paths, and
    neither trusts what it cannot check."""
    _, cert, key = _private_ca(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", BACKEND, str(cert), str(key)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["probe"] is False and "CERTIFICATE_VERIFY_FAILED" in seen["failed"]
