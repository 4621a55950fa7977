"""The agent's cloud sources against real protocols on loopback: AWS through moto in server mode (a real AWS API
emulator) with Ubuntu-style botocore, GCP through a small metadata server + Secret Manager following Google's
documented protocol (Metadata-Flavor: Google required for the token; `:access` with a bearer token)."""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.agent_fake import SITE, TRUST, TRUST_JSON, FakeHost, Keys, base_plan, doc_text, with_peer
from tests.test_agent_ship import SYSTEM_PYTHON, install
from wg_mesh.gateway import ship
from wg_mesh.gateway.agent import Agent, Config, make_source
from wg_mesh.gateway.apply import Paths
from wg_mesh.gateway.source_aws import AwsSource
from wg_mesh.gateway.source_gcp import GcpSource
from wg_mesh.gateway.sources import FetchError
from wg_mesh.gateway.wgconf import wg_quick_conf

REGION = "us-east-1"
SECRET, PARAMETER = f"wg-mesh/proj/prod/{SITE}/peers", f"/wg-mesh/proj/prod/{SITE}/private-key"
TOKEN = "ya29.test-token"
KEY_SECRET = "projects/proj/secrets/wg-mesh-0123abcd-gcp-euw3-key/versions/latest"
DOC_SECRET = "projects/proj/secrets/wg-mesh-0123abcd-gcp-euw3-peers/versions/latest"


# --- AWS: moto --------------------------------------------------------------------------------


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The gateway's environment: the endpoint only through AWS_ENDPOINT_URL, credentials from the environment."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    kwargs = {"region_name": REGION, "endpoint_url": moto_url}
    return boto3.client("secretsmanager", **kwargs), boto3.client("ssm", **kwargs)


def test_aws_source_reads_the_secret_and_the_secure_string(aws: tuple[Any, Any], tmp_path: Path) -> None:
    secrets, ssm = aws
    keys = Keys()
    text = doc_text(base_plan(), keys)
    secrets.create_secret(Name=SECRET, SecretString=text)
    ssm.put_parameter(Name=PARAMETER, Value=keys.private, Type="SecureString", Overwrite=True)
    source = make_source(
        {"kind": "aws", "region": REGION, "document_secret": SECRET, "private_key_parameter": PARAMETER}
    )
    assert isinstance(source, AwsSource)
    assert source.document() == text
    assert source.private_key() == keys.private

    logs: list[str] = []
    host = FakeHost()
    agent = Agent(Config(site=SITE, source={}, trust=TRUST), source, host, Paths.under(str(tmp_path)), logs.append)
    assert agent.cycle()
    added = doc_text(with_peer(base_plan(), "site-c", "10.77.0.0/16"), keys)
    secrets.put_secret_value(SecretId=SECRET, SecretString=added)
    assert agent.cycle()
    assert "site-c" in Path(agent.paths.mapping).read_text()
    assert keys.private not in "\n".join(logs)
    secrets.delete_secret(SecretId=SECRET, ForceDeleteWithoutRecovery=True)


def test_aws_failures_are_fetch_errors(aws: tuple[Any, Any]) -> None:
    source = AwsSource(REGION, "wg-mesh/proj/prod/nowhere/peers", "/wg-mesh/proj/prod/nowhere/private-key")
    with pytest.raises(FetchError, match="ResourceNotFoundException"):
        source.document()
    with pytest.raises(FetchError, match="ParameterNotFound"):
        source.private_key()


def test_aws_unreachable_endpoint_is_a_fetch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard port: connection refused
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    started = time.monotonic()
    with pytest.raises(FetchError, match="secretsmanager get_secret_value"):
        AwsSource(REGION, SECRET, PARAMETER).document()
    assert time.monotonic() - started < 30


# --- GCP: metadata server (the token) and Secret Manager (document and key) ------------------------------------


class Gce:
    """The instance's view of GCE: its service account's token and the Secret Manager versions (name -> payload)."""

    def __init__(self) -> None:
        self.secrets: dict[str, str] = {}
        self.requests: list[str] = []


class Handler(BaseHTTPRequestHandler):
    gce: Gce

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in {"Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.gce.requests.append(self.path)
        if url.path.startswith("/computeMetadata/v1/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403, "Missing Metadata-Flavor:Google header.")
            if url.path != "/computeMetadata/v1/instance/service-accounts/default/token":
                return self._send(404, "not found")
            body = {"access_token": TOKEN, "expires_in": 3599, "token_type": "Bearer"}
            return self._send(200, json.dumps(body), {"Metadata-Flavor": "Google", "Content-Type": "application/json"})
        if url.path.startswith("/v1/") and url.path.endswith(":access"):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._send(401, json.dumps({"error": {"code": 401, "status": "UNAUTHENTICATED"}}))
            name = url.path.removeprefix("/v1/").removesuffix(":access")
            if name not in self.gce.secrets:
                return self._send(404, json.dumps({"error": {"code": 404, "status": "NOT_FOUND"}}))
            data = base64.b64encode(self.gce.secrets[name].encode()).decode()
            return self._send(200, json.dumps({"name": name, "payload": {"data": data}}))
        self._send(404, "not found")


@pytest.fixture
def gce(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Gce, str]]:
    state = Gce()
    handler = type("BoundHandler", (Handler,), {"gce": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("WG_MESH_SECRET_MANAGER_URL", url)
    try:
        yield state, url
    finally:
        server.shutdown()
        server.server_close()


def test_gcp_source_reads_the_document_and_the_key_from_secret_manager(gce: tuple[Gce, str]) -> None:
    """Both are `versions/latest` of a secret: an old VM, its replacement and an HA pair (each its own source) read
    the same document, and a new version is what every one of them reads next."""
    state, url = gce
    keys = Keys()
    state.secrets[DOC_SECRET], state.secrets[KEY_SECRET] = doc_text(base_plan(), keys), keys.private
    old, new = GcpSource(DOC_SECRET, KEY_SECRET, metadata_url=url), GcpSource(DOC_SECRET, KEY_SECRET, metadata_url=url)
    assert old.document() == new.document() == state.secrets[DOC_SECRET]
    added = doc_text(with_peer(base_plan(), "site-c", "10.77.0.0/16"), keys)
    state.secrets[DOC_SECRET] = added
    assert old.document() == new.document() == added
    assert old.private_key() == keys.private
    assert f"/v1/{DOC_SECRET}:access" in state.requests


def test_gcp_agent_applies_and_refuses_what_it_reads(gce: tuple[Gce, str], tmp_path: Path) -> None:
    state, url = gce
    keys = Keys()
    state.secrets[DOC_SECRET], state.secrets[KEY_SECRET] = doc_text(base_plan(), keys), keys.private
    logs: list[str] = []
    agent = Agent(
        Config(site=SITE, source={}, trust=TRUST),
        GcpSource(DOC_SECRET, KEY_SECRET, metadata_url=url),
        FakeHost(),
        Paths.under(str(tmp_path)),
        logs.append,
    )
    assert agent.cycle()
    state.secrets[DOC_SECRET] = "{corrupt"
    assert not agent.cycle()
    assert 'reason="parse"} 1' in Path(agent.paths.metrics).read_text()
    assert keys.private not in "\n".join(logs)


def test_gcp_failures_are_fetch_errors(gce: tuple[Gce, str]) -> None:
    state, url = gce
    source = GcpSource(DOC_SECRET, KEY_SECRET, metadata_url=url)
    with pytest.raises(FetchError, match="HTTP 404"):
        source.document()  # no such secret (yet)
    with pytest.raises(FetchError, match="HTTP 404"):
        source.private_key()
    state.secrets[DOC_SECRET] = "x" * (150 * 1024)  # more than a 64 KiB payload can be: refused before parsing
    with pytest.raises(FetchError, match="more than"):
        source.document()


def test_the_metadata_flavor_header_is_required(gce: tuple[Gce, str]) -> None:
    import urllib.error
    import urllib.request

    state, url = gce
    state.secrets[DOC_SECRET] = "{}"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/computeMetadata/v1/instance/service-accounts/default/token", timeout=5)
    assert refused.value.code == 403
    assert GcpSource(DOC_SECRET, KEY_SECRET, metadata_url=url).document() == "{}"  # the agent sends it


def system_botocore() -> bool:
    done = subprocess.run([SYSTEM_PYTHON, "-c", "import botocore"], capture_output=True, check=False)
    return done.returncode == 0


@pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists() or shutil.which("wg") is None or not system_botocore(),
    reason="needs Debian's python3 with python3-botocore, and wg",
)
def test_the_shipped_agent_under_debian_python_and_botocore(aws: tuple[Any, Any], tmp_path: Path) -> None:
    """The AWS path as the lab's gateways run it: Debian's python3 and botocore (1.29 on bookworm: no
    AWS_ENDPOINT_URL of its own), the shipped files, `--once` against moto."""
    secrets, ssm = aws
    keys = Keys()
    name, parameter = f"{SECRET}-debian", f"{PARAMETER}-debian"
    secrets.create_secret(Name=name, SecretString=doc_text(base_plan(), keys))
    ssm.put_parameter(Name=parameter, Value=keys.private, Type="SecureString", Overwrite=True)
    lib = install(tmp_path, "aws")
    config = tmp_path / "agent.json"
    text = ship.agent_config(SITE, ship.aws_source(REGION, name, parameter), trust=TRUST_JSON)
    config.write_text(text.replace('"wg0"', '"wgmesh-absent"'))  # an interface this host surely lacks: files only
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k == "PATH"}
    argv = [SYSTEM_PYTHON, "-m", f"{ship.PACKAGE}.agent", "--config", str(config), "--once", "--timeout", "10"]
    done = subprocess.run(
        [*argv, "--root", str(tmp_path / "root")],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(lib)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "root/etc/wireguard/wg0.conf").read_text() == wg_quick_conf(base_plan(), keys.private)
    assert keys.private not in done.stderr + done.stdout


@pytest.mark.skipif(
    not Path(SYSTEM_PYTHON).exists() or shutil.which("wg") is None or not system_botocore(),
    reason="needs Debian's python3 with python3-botocore, and wg",
)
def test_an_aws_first_boot_installs_the_bundle_then_applies(aws: tuple[Any, Any], tmp_path: Path) -> None:
    """What an AWS user data runs (ship.once_command(bundled=True)) with only the boot modules on disk: the bootstrap
    fetches the agent's bundle from Secrets Manager (moto), checks its pin, installs it, and the agent's --once
    applies the document. A bundle secret holding anything else (here: the older format, a SecretString of base64
    gzip) is refused, saying so, and nothing is installed; the SecretBinary the program stores, as the provider writes
    it (base64 decoded), comes back from botocore as the bytes the pin covers."""
    secrets, ssm = aws
    keys = Keys()
    name, parameter, bundle = f"{SECRET}-boot", f"{PARAMETER}-boot", f"{SECRET}-boot-agent"
    secrets.create_secret(Name=name, SecretString=doc_text(base_plan(), keys))
    ssm.put_parameter(Name=parameter, Value=keys.private, Type="SecureString", Overwrite=True)
    tampered = base64.b64encode(gzip.compress(b'{"files":{"agent.py":"import os"}}')).decode()
    secrets.create_secret(Name=bundle, SecretString=tampered)
    lib = install(tmp_path, "aws", ship.BOOT_MODULES)
    config = tmp_path / "agent.json"
    text = ship.agent_config(SITE, ship.aws_source(REGION, name, parameter, bundle), trust=TRUST_JSON)
    config.write_text(text.replace('"wg0"', '"wgmesh-absent"'))  # an interface this host surely lacks: files only
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k == "PATH"}
    boot = [SYSTEM_PYTHON, "-m", f"{ship.PACKAGE}.bootstrap", "--config", str(config), "--lib", str(lib)]

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, capture_output=True, text=True, env={**env, "PYTHONPATH": str(lib)}, timeout=60, check=False
        )

    refused = run([*boot, "--timeout", "1"])
    assert refused.returncode == 1 and "holds a SecretString, not a SecretBinary" in refused.stderr, refused.stderr
    assert not (lib / ship.PACKAGE / "agent.py").exists()
    secrets.put_secret_value(SecretId=bundle, SecretBinary=ship.bundle_value("aws"))
    installed = run([*boot, "--timeout", "10"])
    assert installed.returncode == 0, installed.stderr
    assert {p.name for p in (lib / ship.PACKAGE).glob("*.py")} == set(ship.modules("aws")) | {"bootstrap.py"}
    once = [SYSTEM_PYTHON, "-m", f"{ship.PACKAGE}.agent", "--config", str(config), "--once", "--timeout", "10"]
    done = run([*once, "--root", str(tmp_path / "root")])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "root/etc/wireguard/wg0.conf").read_text() == wg_quick_conf(base_plan(), keys.private)
    assert keys.private not in done.stderr + done.stdout + installed.stderr
