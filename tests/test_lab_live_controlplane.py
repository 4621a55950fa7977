"""The lab's clouds for `delivery: live` (wg_mesh/lab/clouds/controlplane.py), reached the way a gateway's agent reaches
them: from inside each gateway's namespaces, through the lab's VPC router and 1:1 NAT, with Debian's /usr/bin/python3
(botocore from python3-botocore against moto; urllib against the GCE metadata server and Secret Manager)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.lab.labkit import Session, lab_session
from wg_mesh.lab.clouds.controlplane import AGENT_ENV, ControlPlane, documents
from wg_mesh.lab.fabric.netns import missing_requirements
from wg_mesh.lab.fabric.teardown import find_labs, teardown
from wg_mesh.plan import live
from wg_mesh.tools.stackfile import load

CANNOT_RUN = missing_requirements() + ([] if shutil.which("python3", path="/usr/bin") else ["no /usr/bin/python3"])
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(bool(CANNOT_RUN), reason="the lab cannot run here: " + "; ".join(CANNOT_RUN)),
]
ROOT = Path(__file__).resolve().parent.parent
AWS, GCP, STATIC = "aws-use1", "gcp-euw3", "vps-fra"
CONFIGS: dict[str, dict[str, Any]] = {
    AWS: {"source": {"kind": "aws", "region": "us-east-1", "document_secret": f"wg-mesh/p/s/{AWS}/peers",
                     "private_key_parameter": f"/wg-mesh/p/s/{AWS}/private-key"}},
    GCP: {"source": {"kind": "gcp",
                     "document_secret": f"projects/proj/secrets/wg-mesh-abcd1234-{GCP}-peers/versions/latest",
                     "private_key_secret": f"projects/proj/secrets/wg-mesh-abcd1234-{GCP}-key/versions/latest"}},
    STATIC: {"source": {"kind": "file", "document": "/etc/wg-mesh/document.json",
                        "private_key": "/etc/wg-mesh/private.key"}},
}  # fmt: skip

AWS_CLIENT = """
import botocore.session, hashlib, json, os, sys
session = botocore.session.get_session()
kw = dict(region_name="us-east-1", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
doc = session.create_client("secretsmanager", **kw).get_secret_value(SecretId=sys.argv[1])["SecretString"]
key = session.create_client("ssm", **kw).get_parameter(Name=sys.argv[2], WithDecryption=True)["Parameter"]
print(json.dumps({"doc": doc, "key_sha": hashlib.sha256(key["Value"].encode()).hexdigest(), "type": key["Type"]}))
"""

GCP_CLIENT = """
import base64, hashlib, json, os, sys, urllib.request, urllib.error
def get(url, headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), b""
md = "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token"
bare = get(md, {})[0]
status, headers, body = get(md, {"Metadata-Flavor": "Google"})
token = json.loads(body)["access_token"]
def access(name, token):
    url = os.environ["WG_MESH_SECRET_MANAGER_URL"] + "/v1/" + name + ":access"
    status, _, body = get(url, {"Authorization": "Bearer " + token})
    return status, base64.b64decode(json.loads(body)["payload"]["data"]) if status == 200 else b""
denied = access(sys.argv[1], "not-the-gateway")[0]
doc, key = access(sys.argv[1], token)[1], access(sys.argv[2], token)[1]
print(json.dumps({"bare": bare, "status": status, "flavor": headers.get("Metadata-Flavor"), "doc": doc.decode(),
                  "denied": denied, "key_sha": hashlib.sha256(key).hexdigest()}))
"""


@pytest.fixture
def session() -> Iterator[Session]:
    before = set(find_labs())
    try:
        # The gateways as delivery: user-data builds them (running): the stores are reached from inside them.
        cfg = load(ROOT / "Pulumi.prod.yaml").model_copy(update={"delivery": "user-data"})
        with lab_session(cfg, print) as s:
            yield s
    finally:
        for prefix, state in find_labs().items():
            if prefix not in before and state.owner_pid == os.getpid():
                teardown(state, lambda line: None)


def in_gateway(session: Session, site: str, script: str, *args: str) -> dict[str, Any]:
    node = session.lab.gateways[site]
    env_file = node.path(str(AGENT_ENV)).read_text()
    env = dict(line.split("=", 1) for line in env_file.splitlines() if line and not line.startswith("#"))
    env.update({"PYTHONPATH": "", "VIRTUAL_ENV": ""})
    result = node.run(["/usr/bin/python3", "-I", "-c", script, *args], env=env, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_each_gateway_reads_its_own_store_through_the_lab_internet(session: Session) -> None:
    # what the user data's agent.json would hold: the lab mesh's verify key (wg_mesh.plan.live.trust)
    trusted = {
        site: {**config, "trust": live.trust(session.cfg, session.cfg.site(site), "p", "s", session.keys.verify_key)}
        for site, config in CONFIGS.items()
    }
    plane = ControlPlane(session.lab, trusted, session.keys.signing)
    plane.start()
    for site, node in session.lab.gateways.items():
        plane.provision(site, node)
    published = plane.publish(session.cfg, session.keys.private, session.keys.public, CONFIGS)
    # what publish() wrote, again: the same serial and key, and Ed25519 signatures are deterministic
    scope, seed = trusted[AWS]["trust"]["scope"], session.keys.signing
    docs = documents(
        session.cfg, session.plan, session.keys.public, CONFIGS, scope=scope, serial=plane.serial, seed=seed
    )
    assert {site: p.generation is not None for site, p in published.items()} == dict.fromkeys(CONFIGS, True)

    aws = in_gateway(session, AWS, AWS_CLIENT, CONFIGS[AWS]["source"]["document_secret"],
                     CONFIGS[AWS]["source"]["private_key_parameter"])  # fmt: skip
    assert aws == {"doc": docs[AWS], "key_sha": sha(session.keys.private[AWS]), "type": "SecureString"}

    gcp = in_gateway(session, GCP, GCP_CLIENT, CONFIGS[GCP]["source"]["document_secret"],
                     CONFIGS[GCP]["source"]["private_key_secret"])  # fmt: skip
    assert gcp == {"bare": 403, "status": 200, "flavor": "Google", "doc": docs[GCP], "denied": 403,
                   "key_sha": sha(session.keys.private[GCP])}  # fmt: skip

    node = session.lab.gateways[STATIC]
    for path, content in (("/etc/wg-mesh/document.json", docs[STATIC]),
                          ("/etc/wg-mesh/private.key", session.keys.private[STATIC] + "\n")):  # fmt: skip
        file = node.path(path)
        assert file.read_text() == content and stat.S_IMODE(file.stat().st_mode) == 0o600
    assert not Path("/etc/wg-mesh/document.json").exists()  # the gateway's own mount namespace, not the host's

    # A new document is what the next read gets (a new secret version).
    plane.publish_document(AWS, "not a document")
    aws = in_gateway(session, AWS, AWS_CLIENT, CONFIGS[AWS]["source"]["document_secret"],
                     CONFIGS[AWS]["source"]["private_key_parameter"])  # fmt: skip
    assert aws["doc"] == "not a document"
    plane.publish_document(GCP, "not one either")
    gcp = in_gateway(session, GCP, GCP_CLIENT, CONFIGS[GCP]["source"]["document_secret"],
                     CONFIGS[GCP]["source"]["private_key_secret"])  # fmt: skip
    assert gcp["doc"] == "not one either"
    # The servers are the lab's tracked processes: the teardown ends them with the lab.
    whats = {p.what for p in session.state.processes}
    assert {"moto server", "aws control plane (boto3)", "metadata server", "secretmanager server"} <= whats
    assert subprocess.run(["ip", "netns", "pids", plane.netns], capture_output=True, text=True).stdout.strip()
