"""delivery: live under mocks: the mesh's document signing key and the documents' serials.

prod (live: AWS, GCP and a static site, `protect: true`) runs three times: as it is, with the static site's endpoint
moved (a change of one peer: the other sites' documents change, its own does not), and with `signing_key_epoch: 1`.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import nacl.signing
import pytest
from nacl.exceptions import BadSignatureError

from tests.conftest import STACK_FILES, ProgramRun, run_program
from tests.signed import PAYLOAD_TYPE, pae, verified_body
from tests.test_program import AWS_INSTANCE, RANDOM_BYTES, instance_of, mesh_of
from tests.test_program_live import agent_json, stack_name, stored_document
from wg_mesh import keys
from wg_mesh.config import AwsSite, GcpSite, StaticSite
from wg_mesh.plan import live, signing, topology
from wg_mesh.tools import serial
from wg_mesh.tools.stackfile import read_raw

COMMAND = "command:local:Command"
PROD = next(p for p in STACK_FILES if p.name == "Pulumi.prod.yaml")
STATIC = "vps-fra"
MOVED_ENDPOINT = "203.0.113.99"


def prod_raw() -> dict[str, Any]:
    raw = copy.deepcopy(read_raw(PROD))
    assert isinstance(raw, dict) and raw["delivery"] == "live" and raw["protect"] is True
    return raw


def moved(raw: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(raw)
    (site,) = [s for s in changed["sites"] if s["name"] == STATIC]
    site["endpoint"] = MOVED_ENDPOINT
    return changed


def new_signing_key(raw: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(raw), "signing_key_epoch": 1}


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    raw = prod_raw()
    before = run_program(raw, preview=False, stack=stack_name(PROD))
    result = {"before": before} | {  # each an `up` from the state `before` left
        name: run_program(variant, preview=False, stack=stack_name(PROD), prior=before)
        for name, variant in (("moved", moved(raw)), ("epoch", new_signing_key(raw)))
    }
    for run in result.values():
        assert run.error is None, run.error
    return result


def documents(run: ProgramRun) -> dict[str, dict[str, Any]]:
    """Each site's document body, verified against its own agent.json."""
    return {
        site.name: verified_body(stored_document(run, site), agent_json(run, site)["trust"])
        for site in mesh_of(run).sites
    }


def test_one_signing_key_per_mesh_child_of_it_kept_like_the_keys(runs: dict[str, ProgramRun]) -> None:
    run = runs["before"]
    (component,) = [urn for urn in run.monitor.urns if urn.split("::")[2].split("$")[-1] == keys.SIGNING_KEY_TYPE]
    assert component.endswith("::wg-mesh:index:Mesh$wg-mesh:index:SigningKey::mesh-signing-key")
    random = run.named(RANDOM_BYTES, "mesh-signing-key-random")
    assert random.inputs["length"] == keys.SIGNING_SEED_BYTES
    assert random.inputs["keepers"] == {"signing_key_epoch": "0"}
    # protect: true protects the seed as it does the sites' keys (docs/how-to/teardown.md, "Protection")
    assert run.options(RANDOM_BYTES, random.name).protect
    assert run.options(keys.SIGNING_KEY_TYPE, "mesh-signing-key").protect
    assert run.verify_key is not None and run.signing_seed is not None
    assert run.verify_key.value == signing.verify_key_b64(signing.seed_from_random(run.signing_seed.value))
    for site in mesh_of(run).sites:
        trust = agent_json(run, site)["trust"]
        pinned = live.trust(mesh_of(run), site, "wg-mesh", "prod", run.verify_key.value, floor=trust["floor"])
        assert trust == pinned and trust["floor"] == 1  # a new stack: its documents' first serial
        assert trust["scope"] == "wg-mesh/prod" and trust["signing_key"] == run.verify_key.value


def test_user_data_mode_has_no_signing_key() -> None:
    raw = {**prod_raw(), "delivery": "user-data"}
    run = run_program(raw, preview=True, stack="prod")
    assert run.error is None, run.error
    assert not [r for r in run.of_type(RANDOM_BYTES) if "signing" in r.name] and run.signing_seed is None
    assert not run.of_type(COMMAND) or all("-serial" not in r.name for r in run.of_type(COMMAND))


def test_each_documents_serial_counts_its_unsigned_content(runs: dict[str, ProgramRun]) -> None:
    run = runs["before"]
    bodies = documents(run)
    for site in mesh_of(run).sites:
        command = run.named(COMMAND, f"{site.name}-serial")
        assert (command.inputs["create"], command.inputs["update"]) == (serial.COUNTER_CREATE, serial.COUNTER_UPDATE)
        assert "triggers" not in command.inputs
        assert list(run.options(COMMAND, command.name).ignore_changes) == ["triggers"]
        body = dict(bodies[site.name])
        assert (body["serial"], command.inputs["environment"][serial.CONTENT_ENV]) == (
            serial.parse_counter(command.outputs["stdout"])
        )  # a new stack: serial 1, and the content's digest it was counted for
        # keyed on the SHA-256 of the content with serial 0 (wg_mesh.plan.live.unsigned_digest)
        key_at = {name: dict(b).get("key_at") for name, b in bodies.items()}  # wg_mesh.announce: in the content too
        directory = {
            n: topology.PeerAddress(v.public_ip.value, v.public_key.value, key_at=key_at[n])
            for n, v in run.sites.items()
        }
        values = {
            "directory": directory,
            "public_key": run.sites[site.name].public_key.value,
            "key_at": key_at[site.name],
            "not_after": body.get("not_after"),  # a cloud gateway's (wg_mesh.plan.live.expires)
        }
        assert ("not_after" in body) == (not isinstance(site, StaticSite))
        digest = live.unsigned_digest(mesh_of(run), site.name, body["scope"], values)
        assert command.inputs["environment"] == {serial.CONTENT_ENV: digest} and body["serial"] == 1


def test_a_change_of_one_peer_counts_the_documents_it_changed_only(runs: dict[str, ProgramRun]) -> None:
    before, after = documents(runs["before"]), documents(runs["moved"])
    changed = {name for name in before if {**before[name], "serial": 0} != {**after[name], "serial": 0}}
    # every other site lists vps-fra's endpoint; its own document names it as its public_ip (issue 33 item 6: no
    # endpoint may be the site's own address), and nothing else of it moved
    assert changed == set(before)
    for name in before:  # one more for a changed document: a counter, kept in the state
        assert after[name]["serial"] == before[name]["serial"] + (name in changed), name
        assert (before[name]["generation"] != after[name]["generation"]) == (name in changed), name
    own_before, own_after = dict(before[STATIC]["interface"]), dict(after[STATIC]["interface"])
    assert own_after.pop("public_ip") == MOVED_ENDPOINT != own_before.pop("public_ip")
    assert own_before == own_after


def test_the_user_data_pins_the_signing_key_and_changes_only_with_its_epoch(runs: dict[str, ProgramRun]) -> None:
    before, moved_run, epoch = runs["before"], runs["moved"], runs["epoch"]
    assert before.verify_key is not None and epoch.verify_key is not None
    assert before.verify_key.value != epoch.verify_key.value
    assert epoch.named(RANDOM_BYTES, "mesh-signing-key-random").inputs["keepers"] == {"signing_key_epoch": "1"}
    for site in mesh_of(before).sites:
        if isinstance(site, AwsSite | GcpSite):
            old, same, new = (instance_of(r, site) for r in (before, moved_run, epoch))
            field = "userDataBase64" if old.type == AWS_INSTANCE else "metadata"
            if field == "metadata":
                assert old.inputs[field]["user-data"] == same.inputs[field]["user-data"]
                assert old.inputs[field]["user-data"] != new.inputs[field]["user-data"]
            else:
                assert old.inputs[field] == same.inputs[field] != new.inputs[field]
        else:
            assert isinstance(site, StaticSite)
            texts = [r.exports["static_site_cloud_init"].value[site.name] for r in (before, moved_run, epoch)]
            assert texts[0] == texts[1] != texts[2]
        # a document signed with the old key does not verify against the new agent.json (another keyid, and its
        # signature is not the new key's), nor the reverse
        old_trust, new_trust = agent_json(before, site)["trust"], agent_json(epoch, site)["trust"]
        for text, trust in ((stored_document(before, site), new_trust), (stored_document(epoch, site), old_trust)):
            with pytest.raises(AssertionError):
                verified_body(text, trust)
            with pytest.raises(BadSignatureError):
                _signature_only(text, trust)


def _signature_only(text: str, trust: dict[str, Any]) -> None:
    outer = json.loads(text)
    payload = base64.b64decode(outer["payload"])
    key = nacl.signing.VerifyKey(base64.b64decode(trust["signing_key"]))
    key.verify(pae(PAYLOAD_TYPE, payload), base64.b64decode(outer["signatures"][0]["sig"]))


def test_the_document_is_public_where_it_was_and_secret_where_it_was(runs: dict[str, ProgramRun]) -> None:
    run = runs["before"]
    assert run.exports["static_site_documents"].secret
    for site in mesh_of(run).sites:
        if isinstance(site, GcpSite):
            assert "metadata" not in instance_of(run, site).secret_inputs
    text = json.dumps(run.exports["static_site_documents"].value)
    assert "payloadType" in text and STATIC in run.exports["static_site_documents"].value


def test_the_stamps_are_declared_in_preview_where_every_document_is_unknown() -> None:
    """Not created inside an apply: in a new stack's preview nothing a document is made of is known (applies over
    unknowns do not run), yet every serial's Command is there."""
    run = run_program(prod_raw(), preview=True, stack="prod")
    assert run.error is None, run.error
    assert not any(site.public_key.known for site in run.sites.values())
    assert {r.name for r in run.of_type(COMMAND)} >= {f"{s.name}-serial" for s in mesh_of(run).sites}
