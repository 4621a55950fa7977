"""`wg-mesh plan`: the program under mocks lists what pulumi up creates per site and what replaces it; `--before`
says what a config change replaces, updates or leaves, and what traffic sees. Pure/mock: no cloud, no lab.

The runs are shared by the module (each ~0.5 s): the dev stack as it is, and variants of it."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, run_program, with_delivery
from wg_mesh.cli import main, plancmd
from wg_mesh.cli.plancmd import Planned
from wg_mesh.plan import planreport, preview
from wg_mesh.tools.stackfile import read_raw

DEV = REPO / "Pulumi.dev.yaml"
UNDERLAY = REPO / "examples/underlay/Pulumi.underlay.yaml"
NEW_SITE = {"name": "vps-new", "cloud": "static", "endpoint": "203.0.113.50", "overlay_ip": "10.200.0.9",
            "cidrs": ["10.60.0.0/24"]}  # fmt: skip
PRINTED: list[str] = []  # every text and JSON this module renders (in this process): no secret may appear in any


def _write(tmp: Path, name: str, raw: Any) -> Path:
    path = tmp / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": raw}}))
    return path


def _edit(raw: Any, change: Callable[[Any], None]) -> Any:
    raw = copy.deepcopy(raw)
    change(raw)
    return raw


def _site(raw: Any, name: str) -> dict[str, Any]:
    return next(s for s in raw["sites"] if s["name"] == name)


class Runs:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cache: dict[str, Planned] = {}

    def get(self, name: str, raw: Any, before: Planned | None = None) -> Planned:
        """The plan of `raw` (cached by `name`); `before`: the earlier config's, whose resources aliases find."""
        if name not in self.cache:
            path = _write(self.tmp, name, raw)
            self.cache[name] = plancmd.plan_file(path, project="wg-mesh", stack="dev", before=before)
        return self.cache[name]

    def diff(self, before: Planned, after: Planned) -> dict[str, Any]:
        found = preview.diff(before.resources, after.resources)
        data = planreport.change_report(before.cfg, after.cfg, found, (before.outputs, after.outputs))
        PRINTED.extend([json.dumps(data), planreport.change_text(data, "test")])
        return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def dev_raw() -> Any:
    return read_raw(DEV)


def _names(entries: list[dict[str, Any]]) -> set[str]:
    return {e["name"] for e in entries}


def _one(entries: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [e for e in entries if e["name"] == name]
    return found


def test_the_dev_plan_lists_each_sites_gateway_address_and_routes(runs: Runs, dev_raw: Any) -> None:
    dev = runs.get("dev", dev_raw)
    data = planreport.listing(dev.cfg, dev.resources)
    PRINTED.extend([json.dumps(data), planreport.listing_text(data, "dev")])
    groups = {g["site"]: g for g in data["sites"]}
    assert set(groups) == {"aws-use1", "gcp-euw3", None} and groups["aws-use1"]["cloud"] == "aws"
    aws = {(e["short_type"], e["name"]): e for e in groups["aws-use1"]["resources"]}
    gcp = {(e["short_type"], e["name"]): e for e in groups["gcp-euw3"]["resources"]}
    instance = aws[("ec2.Instance", "aws-use1-instance")]
    assert {"input": "instanceType", "by": "program"} in instance["replaced_by"]
    assert {"input": "userDataBase64", "by": "user data"} in instance["replaced_by"]
    assert {"input": "subnetId", "by": "provider"} in instance["replaced_by"]
    assert "ami" not in {r["input"] for r in instance["replaced_by"]}  # ignore_changes: a new AMI is no diff
    assert instance["secret_inputs"] == ["userDataBase64"] and not instance["delete_before_replace"]
    assert ("ec2.Eip", "aws-use1-eip") in aws and ("ec2.EipAssociation", "aws-use1-eip-assoc") in aws
    assert sum(kind == "ec2.Route" for kind, _ in aws) == 3  # the subnet's default route and one per remote range
    vm = gcp[("compute.Instance", "gcp-euw3-instance")]
    assert {"input": 'metadata["user-data"]', "by": "program"} in vm["replaced_by"]
    routes = [e for (kind, _), e in gcp.items() if kind == "compute.Route"]
    assert len(routes) == 2 and all(r["delete_before_replace"] for r in routes)
    text = planreport.listing_text(data, "dev")
    assert "ec2.Instance                 aws-use1-instance" in text
    assert "secret: userDataBase64 (never printed)" in text and "traffic through it stops meanwhile" in text


def test_the_plan_program_is_the_repositorys(runs: Runs, dev_raw: Any) -> None:
    """wg_mesh.program.main and __main__.py declare the same resources with the same inputs."""
    repo = run_program(dev_raw, preview=False, stack="dev")
    dev = runs.get("dev", dev_raw)

    def declared(resources: list[Any]) -> list[tuple[str, str, str]]:
        return sorted((r.type, r.name, json.dumps(r.inputs, sort_keys=True, default=str)) for r in resources)

    assert declared(repo.resources) == declared(dev.run.resources)


def test_an_instance_type_change_replaces_the_aws_gateway_through_the_gate(runs: Runs, dev_raw: Any) -> None:
    bigger = _edit(dev_raw, lambda raw: _site(raw, "aws-use1").update(instance_type="c6i.4xlarge"))
    data = runs.diff(runs.get("dev", dev_raw), runs.get("bigger", bigger))
    instance = _one(data["replaced"], "aws-use1-instance")
    assert instance["inputs"] == ["instanceType"] and instance["forced_by"] == {"instanceType": "program"}
    assert instance["order"] == "create-before-delete"
    assert _names(data["replaced"]) == {"aws-use1-instance", "aws-use1-ready", "aws-use1-eip-assoc"}
    assert _one(data["replaced"], "aws-use1-eip-assoc")["order"] == "create-before-delete"
    assert all(e["short_type"] == "ec2.Route" and e["inputs"] == ["networkInterfaceId"] for e in data["updated"])
    assert not data["created"] and not data["deleted"] and data["unchanged"] > 20
    (said,) = data["traffic"]["aws-use1"][:1]
    assert "create-before-delete through the readiness gate" in said and planreport.REPLACEMENTS in said
    assert data["traffic"]["gcp-euw3"] == ["nothing changes for its traffic"]


def test_a_changed_image_replaces_the_gateway(runs: Runs, dev_raw: Any) -> None:
    old = _edit(dev_raw, lambda raw: _site(raw, "aws-use1").update(image="ami-0123456789abcdef0"))
    new = _edit(dev_raw, lambda raw: _site(raw, "aws-use1").update(image="ami-0fedcba9876543210"))
    data = runs.diff(runs.get("image-old", old), runs.get("image-new", new))
    instance = _one(data["replaced"], "aws-use1-instance")
    assert instance["forced_by"] == {"ami": "provider"}


def test_a_site_added_in_live_delivery_replaces_no_instance(runs: Runs, dev_raw: Any) -> None:
    live = {**dev_raw, "delivery": "live"}
    grown = _edit(live, lambda raw: raw["sites"].append(NEW_SITE))
    data = runs.diff(runs.get("live", live), runs.get("live-grown", grown))
    assert not [e for e in data["replaced"] if e["type"] in preview.GATEWAY_TYPES], data["replaced"]
    assert "aws-use1-instance" not in _names(data["updated"])
    assert "gcp-euw3-instance" not in _names(data["updated"])  # its document is a secret of its own
    assert _one(data["replaced"], "aws-use1-peers-version")["inputs"] == ["secretString"]  # a new version
    assert _one(data["replaced"], "gcp-euw3-peers-version")["inputs"] == ["secretData"]
    for site in ("aws-use1", "gcp-euw3"):
        assert data["traffic"][site] == [data["traffic"][site][0]] and "no restart" in data["traffic"][site][0]
    assert data["traffic"]["vps-new"][0].startswith("a new site")


def test_a_site_added_in_user_data_delivery_replaces_every_gateway(runs: Runs, dev_raw: Any) -> None:
    grown = _edit(dev_raw, lambda raw: raw["sites"].append(NEW_SITE))
    data = runs.diff(runs.get("dev", dev_raw), runs.get("grown", grown))
    gateways = _one(data["replaced"], "aws-use1-instance"), _one(data["replaced"], "gcp-euw3-instance")
    assert gateways[0]["forced_by"]["userDataBase64"] == "user data"
    assert gateways[1]["forced_by"]["metadata"] == "program"
    assert all(g["secret_inputs"] for g in gateways)
    assert {"gcp-euw3-to-10-200-0-0-24", "gcp-euw3-to-10-10-0-0-16"} <= _names(data["replaced"])  # next hop: new VM
    assert any("re-created (delete-before-create)" in s for s in data["traffic"]["gcp-euw3"])


def test_a_private_path_gateway_is_replaced_delete_before_create(runs: Runs) -> None:
    raw = read_raw(UNDERLAY)
    bigger = _edit(raw, lambda r: _site(r, "aws-use1").update(instance_type="c6i.4xlarge"))
    data = runs.diff(runs.get("underlay", raw), runs.get("underlay-bigger", bigger))
    instance = _one(data["replaced"], "aws-use1-instance")
    assert instance["order"] == "delete-before-create"
    assert any("the site is down while the new one boots" in s for s in data["traffic"]["aws-use1"])


# --- a rename (previous_names) ------------------------------------------------------------------------------------

RENAMED_DEV = {"aws-use1": "aws-east", "gcp-euw3": "gcp-paris"}
# What a rename must not replace (docs/how-to/rename.md): the address and the key (the promise), the networks and the
# security groups (their descriptions name the site and are force-new: component.description_kept)
KEPT_ACROSS_A_RENAME = (
    "aws:ec2/eip:Eip",
    "gcp:compute/address:Address",
    "random:index/randomBytes:RandomBytes",
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/securityGroup:SecurityGroup",
    "gcp:compute/network:Network",
    "gcp:compute/subnetwork:Subnetwork",
)


def _rename(raw: Any, new_names: dict[str, str]) -> Any:
    """Every site in `new_names` renamed, its old name in previous_names, references to it (private paths, relay)
    following."""
    raw = copy.deepcopy(raw)
    for site in raw["sites"]:
        if site["name"] in new_names:
            site.update(name=new_names[site["name"]], previous_names=[site["name"]])
    for path in raw.get("private_paths", []):
        path["sites"] = [new_names.get(name, name) for name in path["sites"]]
    if raw.get("relay") in new_names:
        raw["relay"] = new_names[raw["relay"]]
    return raw


def test_renaming_devs_two_sites_follows_the_aliases_and_names_only_the_real_replacements(
    runs: Runs, dev_raw: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --before` matches resources as Pulumi's engine does: a resource found by an alias (the site's
    previous_names, inherited by its children) is the old one, not a deletion and a creation. Both gateways are
    replaced (their user data names the site) with what follows them; the address, key, network and security group
    are kept. Before aliases were followed: 29 created and 29 deleted."""
    path = _write(runs.tmp, "dev-renamed", _rename(dev_raw, RENAMED_DEV))
    assert main(["plan", "--file", str(path), "--before", str(DEV), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    PRINTED.append(json.dumps(data))
    assert (data["created"], data["deleted"]) == ([], [])
    assert _names(data["replaced"]) == {
        "aws-east-instance", "aws-east-ready", "aws-east-eip-assoc",  # the gateway, its gate, the address moving
        "gcp-paris-instance", "gcp-paris-ready", "gcp-paris-to-10-10-0-0-16", "gcp-paris-to-10-200-0-0-24",
    }  # fmt: skip
    assert _one(data["replaced"], "aws-east-instance")["forced_by"] == {"userDataBase64": "user data"}
    assert _one(data["replaced"], "gcp-paris-instance")["forced_by"] == {"metadata": "program"}
    old = {new: old for old, new in RENAMED_DEV.items()}
    for entry in data["replaced"] + data["updated"]:
        site = entry["site"]
        assert entry["was"] == entry["name"].replace(site, old[site], 1), entry
    for new, previous in old.items():
        said = data["traffic"][new]
        assert said[0].startswith(f"renamed from {previous} (previous_names): ")
        assert said[0].endswith("its public address and key are kept")
        assert data["traffic"][previous] == [f"renamed to {new}: see {new}"]


@pytest.mark.parametrize("stack", ["ha", "prod"])
def test_a_rename_keeps_the_address_key_network_and_security_group_on_every_kind_of_site(
    runs: Runs, stack: str
) -> None:
    """Every site of the stack renamed (HA pairs on both clouds, live delivery, a static site): nothing is created or
    deleted, nothing in KEPT_ACROSS_A_RENAME is replaced, and nothing is replaced for its description alone (a
    force-new description naming the site replaced the GCP address, a created GCP network and the security groups)."""
    raw = read_raw(REPO / f"Pulumi.{stack}.yaml")
    before = runs.get(stack, raw)
    after = runs.get(f"{stack}-renamed", _rename(raw, {s["name"]: f"new-{s['name']}" for s in raw["sites"]}), before)
    data = runs.diff(before, after)
    assert (data["created"], data["deleted"]) == ([], [])
    assert not [e["name"] for e in data["replaced"] if e["type"] in KEPT_ACROSS_A_RENAME]
    assert not [e["name"] for e in data["replaced"] if set(e["forced_by"]) <= {"description"}]
    for site in after.cfg.sites:
        assert "its public address and key are kept" in data["traffic"][site.name][0], data["traffic"][site.name]


def test_a_static_site_is_told_to_re_apply_its_wg0_conf_in_user_data_and_its_document_in_live(runs: Runs) -> None:
    raw = read_raw(REPO / "Pulumi.prod.yaml")
    for delivery, said in (("user-data", "re-apply wg0.conf"), ("live", "copy the new static_site_documents")):
        base = with_delivery(raw, delivery)
        grown = _edit(base, lambda r: r["sites"].append(NEW_SITE))
        data = runs.diff(runs.get(f"prod-{delivery}", base), runs.get(f"prod-{delivery}-grown", grown))
        assert any(said in s for s in data["traffic"]["vps-fra"]), data["traffic"]["vps-fra"]


def test_no_secret_is_in_any_plan_output(runs: Runs, dev_raw: Any) -> None:
    """Every listing and diff of this module (re-made here if this test runs alone or on another xdist worker)."""
    dev = runs.get("dev", dev_raw)
    listing = planreport.listing(dev.cfg, dev.resources)
    PRINTED.extend([json.dumps(listing), planreport.listing_text(listing, "dev")])
    live = {**dev_raw, "delivery": "live"}
    grown = _edit(dev_raw, lambda raw: raw["sites"].append(NEW_SITE))
    live_grown = _edit(live, lambda raw: raw["sites"].append(NEW_SITE))
    runs.diff(dev, runs.get("grown", grown))  # the names the other tests use: a run is made once per process
    runs.diff(runs.get("live", live), runs.get("live-grown", live_grown))
    hidden: set[str] = set()
    for planned in runs.cache.values():
        for resource in planned.run.resources:
            hidden |= {v for k, v in resource.outputs.items() if k in ("base64", "hex")}  # the mocks' key bytes
        configs = planned.run.exports["wireguard_configs"].value
        hidden |= set(re.findall(r"PrivateKey = (\S+)", "\n".join(configs.values())))
        for resource in planned.run.resources:
            for name in resource.secret_inputs:
                value = resource.inputs[name]
                parts = value.values() if isinstance(value, dict) else [value]
                hidden |= {p for p in parts if isinstance(p, str) and len(p) > 40}  # keys, user data, documents
    assert len(hidden) > 10
    leaks = [s for s in hidden for text in PRINTED if s in text]
    assert not leaks
    assert not any("#cloud-config" in text or "PrivateKey" in text for text in PRINTED)


def test_the_json_shape(runs: Runs, dev_raw: Any, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    monkeypatch.chdir(REPO)
    assert main(["plan", "--stack", "dev", "--json", "--site", "gcp-euw3"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"delivery", "count", "sites"}
    (group,) = data["sites"]
    assert group["site"] == "gcp-euw3" and group["cloud"] == "gcp"
    keys = {"type", "short_type", "name", "site", "replaced_by", "delete_before_replace", "protect", "secret_inputs"}
    assert all(set(e) == keys for e in group["resources"])
    bigger = _write(
        runs.tmp, "dev", _edit(dev_raw, lambda raw: _site(raw, "aws-use1").update(instance_type="c6i.4xlarge"))
    )
    assert main(["plan", "--file", str(bigger), "--before", str(DEV), "--json"]) == 0
    changed = json.loads(capsys.readouterr().out)
    assert set(changed) == {"created", "deleted", "replaced", "updated", "unchanged", "traffic"}
    assert set(changed["replaced"][0]) == {
        "type", "short_type", "name", "site", "inputs", "unknown", "forced_by", "order", "secret_inputs", "was"
    }  # fmt: skip


def test_a_bad_before_file_exits_1_and_a_missing_stack_as_validate_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.chdir(REPO)
    bad = tmp_path / "old.yaml"
    bad.write_text("config:\n  wg-mesh:mesh:\n    overlay_cidr: 10.200.0.0/33\n    sites: []\n")
    assert main(["plan", "--stack", "dev", "--before", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad} (--before): " in err and "overlay_cidr" in err
    assert main(["plan", "--stack", "dev", "--before", str(tmp_path / "gone.yaml")]) == 2
    assert "--before" in capsys.readouterr().err
    assert main(["plan", "--stack", "dve"]) == main(["validate", "--stack", "dve"]) == 2
    assert "did you mean dev?" in capsys.readouterr().err


def test_a_new_replacement_trigger_replaces_a_resource_whose_inputs_stay() -> None:
    """The resource option replacement_trigger (the GCP standby zone's stash: `zone`) is no input: its change alone
    replaces the resource, as the engine does; the same trigger with a new input is an update (a stash keeps its
    output)."""
    stash = preview.Resource("pulumi:index:Stash", "gcp-euw3-b-zone", "urn:s", {"input": "europe-west3-b"},
                             replacement_trigger="europe-west3-a")  # fmt: skip
    moved = preview.Resource(stash.type, stash.name, stash.urn, stash.inputs, replacement_trigger="europe-west3-c")
    (change,) = preview.diff([stash], [moved]).replaced
    assert change.forced_by == {preview.TRIGGER: "program"}
    new_input = preview.Resource(stash.type, stash.name, stash.urn, {"input": "europe-west3-d"},
                                 replacement_trigger="europe-west3-a")  # fmt: skip
    found = preview.diff([stash], [new_input])
    assert not found.replaced and [c.inputs for c in found.updated] == [("input",)]
