"""`delivery: live` under mocks: nothing that replaces a gateway depends on the peers or on any key.

Every stack file runs in live mode (prod is live; dev is forced to it). A second run changes the mesh the way an
operator does on day 2 (a new AWS site and a static site with a smaller underlay MTU, every key rotated, another
keepalive): the instances' inputs stay byte-identical, and only the stores (the document secrets, the key parameter
and secret versions) change.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import meshgen
from tests.conftest import STACK_FILES, ProgramRun, run_program, with_delivery
from tests.signed import verified_body
from tests.test_program import (
    AWS_INSTANCE,
    GCP_INSTANCE,
    RANDOM_BYTES,
    instance_of,
    mesh_of,
    strings_in,
    user_data_input,
)
from wg_mesh.config import AwsSite, ConfigError, GcpSite, StaticSite
from wg_mesh.gateway import bootstrap, document, ship, wgmetrics
from wg_mesh.plan import forcenew, inputpolicy, live, render, topology, userdata, wgkey
from wg_mesh.plan.validate import load_mesh
from wg_mesh.tools.stackfile import read_raw

SSM_PARAMETER = "aws:ssm/parameter:Parameter"
SM_SECRET = "aws:secretsmanager/secret:Secret"
SM_VERSION = "aws:secretsmanager/secretVersion:SecretVersion"
ROLE_POLICY = "aws:iam/rolePolicy:RolePolicy"
GCP_SA = "gcp:serviceaccount/account:Account"
GCP_SECRET = "gcp:secretmanager/secret:Secret"
GCP_SECRET_VERSION = "gcp:secretmanager/secretVersion:SecretVersion"
GCP_SECRET_IAM = "gcp:secretmanager/secretIamMember:SecretIamMember"
DEFAULT_COMPUTE_SA_SUFFIX = "-compute@developer.gserviceaccount.com"


def stack_name(path: Path) -> str:
    return path.name.removeprefix("Pulumi.").removesuffix(".yaml")


def live_raw(path: Path) -> dict[str, Any]:
    raw = with_delivery(copy.deepcopy(read_raw(path)), "live")
    assert isinstance(raw, dict)
    return raw


def day_two(raw: dict[str, Any]) -> dict[str, Any]:
    """The same mesh after routine work: two new sites (one with a smaller underlay MTU: the auto MTU drops), every key
    rotated, another keepalive."""
    changed = copy.deepcopy(raw)
    changed["persistent_keepalive"] = 15
    for site in changed["sites"]:
        site["key_epoch"] = site.get("key_epoch", 0) + 1
    changed["sites"] += [
        {"name": "aws-usw2", "cloud": "aws", "region": "us-west-2", "overlay_ip": "10.200.0.41",
         "cidrs": ["10.41.0.0/16"]},
        {"name": "dc-ber", "cloud": "static", "endpoint": "203.0.113.41", "overlay_ip": "10.200.0.42",
         "cidrs": ["192.168.42.0/24"], "underlay_mtu": 1400},
    ]  # fmt: skip
    return changed


@pytest.fixture(scope="module", params=STACK_FILES, ids=[p.name for p in STACK_FILES])
def before_after(request: pytest.FixtureRequest) -> tuple[ProgramRun, ProgramRun]:
    raw = live_raw(request.param)
    runs = tuple(run_program(r, preview=False, stack=stack_name(request.param)) for r in (raw, day_two(raw)))
    for run in runs:
        assert run.error is None, run.error
    assert topology.tunnel_mtu(mesh_of(runs[0])) != topology.tunnel_mtu(mesh_of(runs[1]))
    return runs[0], runs[1]


def cloud_sites_of(run: ProgramRun) -> list[AwsSite | GcpSite]:
    return [s for s in mesh_of(run).sites if isinstance(s, AwsSite | GcpSite)]


def test_a_mesh_change_leaves_every_instance_input_byte_identical(before_after: tuple[ProgramRun, ProgramRun]) -> None:
    before, after = before_after
    sites = cloud_sites_of(before)
    assert sites
    for site in sites:
        old, new = instance_of(before, site), instance_of(after, site)
        # user data, metadata, AMI/image, type, boot disk, service account, profile, network: everything (GCP's
        # document is a secret of its own, no metadata key: every VM of the site reads it, wg_mesh.gcp.live)
        assert old.inputs == new.inputs, site.name
        if isinstance(site, AwsSite):
            assert old.inputs["userDataBase64"] == new.inputs["userDataBase64"]
            assert old.inputs["ami"] == new.inputs["ami"] and old.inputs["instanceType"] == new.inputs["instanceType"]
        else:
            assert old.inputs["metadata"]["user-data"] == new.inputs["metadata"]["user-data"]
            assert old.inputs["bootDisk"] == new.inputs["bootDisk"]
            assert old.inputs["machineType"] == new.inputs["machineType"]
            assert "wg-mesh-peers" not in new.inputs["metadata"]  # the document was this key (item 7)
            # only the user data and the type replace it
            assert before.monitor.replace_on_changes[old.name] == ['metadata["user-data"]', "machineType"]
        # (dependencies differ: a GCP instance's document names the new sites; dependencies replace nothing)
        old_options, new_options = before.options(old.type, old.name), after.options(new.type, new.name)
        assert (old_options.ignore_changes, old_options.delete_before_replace) == (
            new_options.ignore_changes,
            new_options.delete_before_replace,
        )


def test_a_mesh_change_leaves_every_static_sites_cloud_init_as_it_is(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    """A static site's cloud-init (its agent, agent.json with the pinned signing key) is what its operator ran once:
    a mesh change must not ask for it again."""
    before, after = before_after
    statics = [s.name for s in mesh_of(before).sites if isinstance(s, StaticSite)]
    if not statics:
        pytest.skip("no static site in this stack")
    old, new = (run.exports["static_site_cloud_init"].value for run in (before, after))
    assert all(old[name] == new[name] for name in statics)
    assert all("signing_key" in old[name] for name in statics)


def test_a_mesh_change_changes_every_store(before_after: tuple[ProgramRun, ProgramRun]) -> None:
    before, after = before_after
    for site in cloud_sites_of(before):
        if isinstance(site, AwsSite):
            pairs = [(SM_VERSION, f"{site.name}-peers-version", "secretString"),
                     (SSM_PARAMETER, f"{site.name}-private-key", "value")]  # fmt: skip
            for typ, name, field in pairs:
                assert before.named(typ, name).inputs[field] != after.named(typ, name).inputs[field], name
        else:
            for name in (f"{site.name}-key-version", f"{site.name}-peers-version"):
                assert (
                    before.named(GCP_SECRET_VERSION, name).inputs["secretData"]
                    != after.named(GCP_SECRET_VERSION, name).inputs["secretData"]
                ), name


def stored_document(run: ProgramRun, site: AwsSite | GcpSite | StaticSite) -> str:
    if isinstance(site, AwsSite):
        text = run.named(SM_VERSION, f"{site.name}-peers-version").inputs["secretString"]
    elif isinstance(site, GcpSite):
        text = run.named(GCP_SECRET_VERSION, f"{site.name}-peers-version").inputs["secretData"]
    else:
        text = run.exports["static_site_documents"].value[site.name]
    assert isinstance(text, str)
    return text


def stored_key(run: ProgramRun, site: AwsSite | GcpSite | StaticSite) -> str:
    if isinstance(site, AwsSite):
        return str(run.named(SSM_PARAMETER, f"{site.name}-private-key").inputs["value"])
    if isinstance(site, GcpSite):
        return str(run.named(GCP_SECRET_VERSION, f"{site.name}-key-version").inputs["secretData"])
    return str(run.exports["static_site_private_keys"].value[site.name])


def agent_json(run: ProgramRun, site: AwsSite | GcpSite | StaticSite) -> dict[str, Any]:
    """The site's /etc/wg-mesh/agent.json, from the user data the gateway (or the static site's operator) gets."""
    files = {f["path"]: f for f in live_user_data(run, site)["write_files"]}
    config = json.loads(files[ship.CONFIG_PATH]["content"])
    assert isinstance(config, dict)
    return config


def test_every_store_holds_the_sites_signed_document_and_its_own_key(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    """Every live document in the stores (AWS secret, GCE metadata, a static site's stack output) verifies against
    the key pinned in that site's agent.json, and says what topology says."""
    for run in before_after:
        cfg = mesh_of(run)
        bodies = {s.name: verified_body(stored_document(run, s), agent_json(run, s)["trust"]) for s in cfg.sites}
        key_at = {name: body.get("key_at") for name, body in bodies.items()}  # wg_mesh.announce
        directory = {
            n: topology.PeerAddress(v.public_ip.value, v.public_key.value, key_at=key_at[n])
            for n, v in run.sites.items()
        }
        for site in cfg.sites:
            trust, body = agent_json(run, site)["trust"], bodies[site.name]
            plan = topology.interface_plan(cfg, site.name, directory)
            public_key = run.sites[site.name].public_key.value
            assert body == json.loads(
                document.encode_body(
                    plan,
                    public_key,
                    scope=trust["scope"],
                    serial=body["serial"],
                    key_at=body.get("key_at"),
                    not_after=body.get("not_after"),
                    gateways=document.SINGLE if live.single_gateway(site) else None,
                )
            )
            assert body["scope"] == f"wg-mesh/{run.stack}" and body["serial"] >= 1
            key = stored_key(run, site)
            assert key == run.sites[site.name].private_key.value and wgkey.public_key(key) == body["public_key"]
        assert run.exports["static_site_documents"].secret and run.exports["static_site_private_keys"].secret


def key_material_forms(raw_base64: str) -> list[str]:
    """32 bytes of key material as it could leak: base64 (standard and URL-safe), hex, lower and upper case."""
    raw = base64.b64decode(raw_base64)
    return [raw_base64, base64.urlsafe_b64encode(raw).decode(), raw.hex(), raw.hex().upper()]


def test_key_material_is_secret_everywhere(before_after: tuple[ProgramRun, ProgramRun]) -> None:
    """No private key and no document signing seed in plain text anywhere: no public input, stack output, component
    output, user data, document (its base64 payload decoded too) or command line."""
    for run in before_after:
        assert run.signing_seed is not None and run.signing_seed.secret and run.signing_seed.known
        assert run.verify_key is not None and not run.verify_key.secret
        randoms = run.of_type(RANDOM_BYTES)
        assert any(r.name == "mesh-signing-key-random" for r in randoms)
        keys = [
            form for k in run.private_keys() + [r.outputs["base64"] for r in randoms] for form in key_material_forms(k)
        ]
        assert run.signing_seed.value in keys
        for typ, field in ((SSM_PARAMETER, "value"), (GCP_SECRET_VERSION, "secretData")):
            for store in run.of_type(typ):
                assert field in store.secret_inputs, store.name
        public: list[tuple[str, Any]] = [(f"{r.type} {r.name}", r.public_inputs()) for r in run.resources]
        public += [(f"{r.type} {r.name} outputs", r.outputs) for r in run.resources if r.type != RANDOM_BYTES]
        public += [(f"stack output {k}", v.value) for k, v in run.exports.items() if not v.secret]
        public += [(f"component {urn}", outputs) for urn, outputs in run.monitor.component_outputs.items()]
        public += [(f"{n}.user_data", v.user_data.value) for n, v in run.sites.items()]
        for name in run.sites:
            text = stored_document(run, mesh_of(run).site(name))
            payload = base64.b64decode(json.loads(text)["payload"]).decode()
            public += [(f"{name}.document", text), (f"{name}.document payload", payload)]
        for where, value in public:
            for text in strings_in(value):
                assert not any(key in text for key in keys), f"key material in {where}"
        # The user data holds nothing secret now: it is public, and the instances' inputs are not secret.
        assert not any(v.user_data.secret for v in run.sites.values())
        for instance in run.of_type(AWS_INSTANCE):
            assert "userDataBase64" not in instance.secret_inputs


def test_an_aws_gateway_reads_exactly_its_own_parameter_and_secrets(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    run = before_after[1]
    aws_sites = [s for s in cloud_sites_of(run) if isinstance(s, AwsSite)]
    assert aws_sites
    for site in aws_sites:
        parameter = run.named(SSM_PARAMETER, f"{site.name}-private-key")
        secret = run.named(SM_SECRET, f"{site.name}-peers")
        bundle = run.named(SM_SECRET, f"{site.name}-agent")
        assert parameter.inputs["type"] == "SecureString" and parameter.inputs["tier"] == "Standard"
        text = run.named(ROLE_POLICY, f"{site.name}-stores").inputs["policy"]
        policy = json.loads(text)
        grants = [(st["Action"], st["Resource"]) for st in policy["Statement"] if st["Effect"] == "Allow"]
        assert sorted(grants, key=str) == sorted(
            [
                ("ssm:GetParameter", parameter.outputs["arn"]),
                ("secretsmanager:GetSecretValue", [secret.outputs["arn"], bundle.outputs["arn"]]),
            ],
            key=str,
        )
        # The bundle secret holds the agent's package, pinned by the SHA-256 in the user data's agent.json: a
        # SecretBinary, whose input is base64 (the provider stores the decoded bytes: wg_mesh.aws.live).
        inputs = run.named(SM_VERSION, f"{site.name}-agent-version").inputs
        assert "secretString" not in inputs
        # An upgrade from the SecretString format replaces the version (both inputs force-new), created before the
        # instances that depend on it (below): a replaced gateway's bootstrap reads the binary value.
        assert {"secretBinary", "secretString"} <= forcenew.TABLE[SM_VERSION].inputs
        value = base64.b64decode(inputs["secretBinary"], validate=True)
        written = {f["path"]: f for f in live_user_data(run, site)["write_files"]}
        config = json.loads(written[ship.CONFIG_PATH]["content"])
        assert bootstrap.decode(value, config["bundle_sha256"]).keys() == set(ship.modules("aws"))
        (deny,) = [st for st in policy["Statement"] if st["Effect"] == "Deny"]  # every other parameter
        assert deny["NotResource"] == parameter.outputs["arn"]
        assert "*" not in text
        instance = instance_of(run, site)
        versions = [(SM_VERSION, f"{site.name}-peers-version"), (SM_VERSION, f"{site.name}-agent-version")]
        for typ, name in ((SSM_PARAMETER, parameter.name), *versions):
            assert run.depends_on(AWS_INSTANCE, instance.name, typ, name), name
        assert run.depends_on(SM_VERSION, f"{site.name}-peers-version", SSM_PARAMETER, parameter.name)


def test_a_gcp_gateway_runs_as_its_own_account_bound_to_its_sites_secrets(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    run = before_after[1]
    gcp_sites = [s for s in cloud_sites_of(run) if isinstance(s, GcpSite)]
    assert gcp_sites
    accounts = run.of_type(GCP_SA)
    # One account per gateway (gateways: 2: b's own too, tests/test_program_ha.py), all distinct.
    assert len({a.inputs["accountId"] for a in accounts}) == len(accounts) == sum(s.gateways for s in gcp_sites)
    for site in gcp_sites:
        account = run.named(GCP_SA, f"{site.name}-sa")
        assert 6 <= len(account.inputs["accountId"]) <= 30
        instance = instance_of(run, site)
        (service_account,) = [instance.inputs["serviceAccount"]]
        assert service_account == {"email": account.outputs["email"], "scopes": ["cloud-platform"]}
        assert not service_account["email"].endswith(DEFAULT_COMPUTE_SA_SUFFIX)
        for store in ("key", "peers"):  # the private key and the document: one secret each, read by this account
            secret = run.named(GCP_SECRET, f"{site.name}-{store}-secret")
            (member,) = [m for m in run.of_type(GCP_SECRET_IAM) if m.name == f"{site.name}-{store}-accessor"]
            assert member.inputs == {"secretId": secret.id, "role": "roles/secretmanager.secretAccessor",
                                     "member": f"serviceAccount:{account.outputs['email']}"}  # fmt: skip
            for typ, name in ((GCP_SECRET_VERSION, f"{site.name}-{store}-version"), (GCP_SECRET_IAM, member.name)):
                assert run.depends_on(GCP_INSTANCE, instance.name, typ, name), name
        # the document is written after the key it names (as on AWS)
        assert run.depends_on(GCP_SECRET_VERSION, f"{site.name}-peers-version", GCP_SECRET_VERSION,
                              f"{site.name}-key-version")  # fmt: skip
    # Two bindings per gateway, on its site's two secrets.
    assert len(run.of_type(GCP_SECRET_IAM)) == 2 * sum(s.gateways for s in gcp_sites)


def live_user_data(run: ProgramRun, site: AwsSite | GcpSite | StaticSite) -> dict[str, Any]:
    if isinstance(site, StaticSite):
        text = run.exports["static_site_cloud_init"].value[site.name]
    else:
        text = user_data_input(instance_of(run, site))
    parsed = yaml.safe_load(text)
    assert isinstance(parsed, dict)
    return parsed


def test_live_user_data_installs_the_agent_and_starts_it_after_its_first_fetch(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    run = before_after[1]
    for site in mesh_of(run).sites:
        cloud_init = live_user_data(run, site)
        files = {f["path"]: f for f in cloud_init["write_files"]}
        assert render.WG_CONF_PATH not in files and wgmetrics.MAPPING_PATH not in files
        config = json.loads(files[ship.CONFIG_PATH]["content"])
        assert config["site"] == site.name
        source = config["source"]
        for path, text, mode in ship.files(site.name, source, ha=config.get("ha"), trust=config["trust"]):
            assert (files[path]["content"], files[path]["permissions"]) == (text, mode)
        assert files[ship.UNIT_PATH]["content"] == ship.unit_text()
        if isinstance(site, AwsSite):
            assert source["document_secret"] == run.named(SM_SECRET, f"{site.name}-peers").inputs["name"]
            assert (
                source["private_key_parameter"] == run.named(SSM_PARAMETER, f"{site.name}-private-key").inputs["name"]
            )
        elif isinstance(site, GcpSite):
            document_secret, key = (
                f"projects/{site.project}/secrets/{run.named(GCP_SECRET, name).inputs['secretId']}/versions/latest"
                for name in (f"{site.name}-peers-secret", f"{site.name}-key-secret")
            )
            assert source == {"kind": "gcp", "document_secret": document_secret, "private_key_secret": key,
                              "bundle_file": ship.BUNDLE_FILE}  # fmt: skip
            # the package: one b64 file of the user data, the bundle its agent.json pins (an AWS site's: a secret)
            bundle = files[ship.BUNDLE_FILE]
            assert (bundle["encoding"], bundle["permissions"]) == ("b64", "0644")
            value = base64.b64decode(bundle["content"], validate=True)
            assert bootstrap.decode(value, config["bundle_sha256"]).keys() == set(ship.modules("gcp"))
        else:
            assert source == {"kind": "file", "document": live.STATIC_DOCUMENT_PATH,
                              "private_key": live.STATIC_PRIVATE_KEY_PATH}  # fmt: skip
        runcmd = cloud_init["runcmd"]
        wg_unit = f"wg-quick@{render.INTERFACE}"
        assert cloud_init["bootcmd"] == [["install", "-d", "-m", render.WG_DIR_MODE, "/etc/wireguard"]]
        # fail-fast (render.cloud_config); the agent's first fetch before the metrics (it writes their mapping)
        assert runcmd[:4] == [
            "set -eu",
            ["sysctl", "-p", render.SYSCTL_PATH],
            ["systemctl", "enable", "--now", inputpolicy.UNIT_NAME],  # the INPUT policy before anything listens
            list(ship.once_command(bundled=not isinstance(site, StaticSite))),  # the bundle first (AWS, GCP)
        ]
        assert runcmd[7:9] == [
            ["systemctl", "enable", "--now", wg_unit],
            ["systemctl", "enable", "--now", ship.UNIT_NAME],
        ]
        assert runcmd[-1].startswith(f"for unit in {wg_unit} {inputpolicy.UNIT_NAME} {ship.UNIT_NAME} ")


def test_live_aws_user_data_fits_and_does_not_grow_with_the_mesh() -> None:
    small, large = (load_mesh({**meshgen.generate_mesh(n, raised_quotas=True), "delivery": "live"}) for n in (4, 160))
    sizes = [userdata.live_user_data_size(cfg, next(s for s in cfg.sites if isinstance(s, AwsSite)), exact=True)
             for cfg in (small, large)]  # fmt: skip
    assert sizes[0] == sizes[1] < userdata.AWS_USER_DATA_LIMIT
    with pytest.raises(ConfigError):  # the same 160 sites in user data would not fit
        load_mesh(meshgen.generate_mesh(160, raised_quotas=True))


def test_a_document_past_its_store_is_refused_naming_the_site(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = {**meshgen.generate_mesh(8), "delivery": "live"}
    cfg = load_mesh(raw)
    size = userdata.document_size(cfg, cfg.sites[0].name)
    monkeypatch.setitem(live.DOCUMENT_LIMITS, "aws", size - 1)
    with pytest.raises(ConfigError) as caught:
        load_mesh(raw)
    assert any(p.startswith("sites[0]: ") and "peer document" in p for p in caught.value.problems)


def test_a_replaced_gcp_vm_reads_the_document_its_replacement_reads(
    before_after: tuple[ProgramRun, ProgramRun],
) -> None:
    """Issue 32 item 7: when one `up` replaces a GCP gateway (a new type, image or agent) and changes its document
    (here every key rotated), the old VM serves until the new one's readiness gate passes, so the store its agent.json
    names must be one that `up` writes the new document to: the site's secret, not the VM resource's own metadata
    (Pulumi never updates the old VM of a replacement: on 58f58f7 the old VM kept the old document, and the old key
    past key_at)."""
    before, after = before_after
    for site in (s for s in cloud_sites_of(before) if isinstance(s, GcpSite)):
        read_by_old = agent_json(before, site)["source"]["document_secret"]  # what the old VM's agent reads
        secret = after.named(GCP_SECRET, f"{site.name}-peers-secret")
        assert read_by_old == f"projects/{site.project}/secrets/{secret.inputs['secretId']}/versions/latest"
        versions = [run.named(GCP_SECRET_VERSION, f"{site.name}-peers-version") for run in (before, after)]
        assert versions[0].inputs["secretData"] != versions[1].inputs["secretData"]  # the new document, there
        assert after.depends_on(GCP_SECRET_VERSION, versions[1].name, GCP_SECRET, secret.name)
        assert not any("peers" in k for k in instance_of(after, site).inputs["metadata"])  # nothing on the VM
