"""Other languages (wg_mesh.provider): the schema Pulumi's Python SDK infers from Mesh's annotations, checked without
the Pulumi CLI, in process and as the plugin serves it over the provider protocol (GetSchema on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import grpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tests.conftest import REPO
from wg_mesh import __version__
from wg_mesh.args import INPUT_KEYS
from wg_mesh.mesh import MESH_TYPE
from wg_mesh.provider import schema

PLUGIN = REPO / "provider"


def mesh_resource(spec: dict[str, Any]) -> dict[str, Any]:
    resource: dict[str, Any] = spec["resources"][MESH_TYPE]
    return resource


def bare(prop: Any) -> Any:
    """A property without its descriptions (tests/test_args_ide.py checks those)."""
    if isinstance(prop, dict):
        return {k: bare(v) for k, v in prop.items() if k != "description"}
    return prop


def test_the_schema_names_the_component_by_its_type_token() -> None:
    spec = schema()
    assert spec["name"] == "wg-mesh" and spec["version"] == __version__
    assert list(spec["resources"]) == [MESH_TYPE]  # the token the Python component registers
    assert mesh_resource(spec)["isComponent"] is True
    assert set(spec["types"]) == {
        "wg-mesh:index:SiteArgs",
        "wg-mesh:index:SiteOutputs",
        "wg-mesh:index:PrivatePathArgs",
    }
    paths = mesh_resource(spec)["inputProperties"]["privatePaths"]
    assert bare(paths["items"]) == {"$ref": "#/types/wg-mesh:index:PrivatePathArgs", "plain": True}


def test_inputs_are_the_stack_files_keys_with_the_network_ids_as_inputs() -> None:
    spec = schema()
    inputs = mesh_resource(spec)["inputProperties"]
    assert sorted(mesh_resource(spec)["requiredInputs"]) == ["overlayCidr", "sites"]
    assert bare(inputs["overlayCidr"]) == {"type": "string", "plain": True}
    assert bare(inputs["sites"]["items"]) == {"$ref": "#/types/wg-mesh:index:SiteArgs", "plain": True}
    site = spec["types"]["wg-mesh:index:SiteArgs"]["properties"]
    # The existing network's ids may come from the program's own resources: not plain (Inputs) ...
    camel = {"vpc_id": "vpcId", "subnet_id": "subnetId", "standby_subnet_id": "standbySubnetId"}
    for key in INPUT_KEYS:
        assert "plain" not in site[camel.get(key, key)], key
    # ... and so are the route tables, one by one; how many there are must be known (one route per table and range).
    assert bare(site["routeTableIds"]) == {"type": "array", "items": {"type": "string"}, "plain": True}
    # Everything else decides which resources exist and how they are named: known when the program runs.
    plain = {name for name, prop in site.items() if prop.get("plain")}
    assert {"name", "cloud", "region", "overlayIp", "cidrs", "gateways", "project", "zone"} <= plain


def test_outputs_are_typed() -> None:
    spec = schema()
    outputs = mesh_resource(spec)["properties"]
    assert outputs["siteOutputs"]["type"] == "object"
    assert outputs["siteOutputs"]["additionalProperties"]["$ref"] == "#/types/wg-mesh:index:SiteOutputs"
    assert outputs["publicIps"]["additionalProperties"]["type"] == "string"
    assert outputs["tunnelMtu"]["type"] == "integer"
    site = spec["types"]["wg-mesh:index:SiteOutputs"]
    assert {"publicIp", "overlayIp", "publicKey", "securityGroupId", "networkInterfaceId"} <= set(site["properties"])
    assert {"instanceSelfLink", "networkTag"} <= set(site["properties"])


def test_the_plugin_serves_the_same_schema_over_the_provider_protocol() -> None:
    """The plugin directory's entry point, started as the engine would start it (its engine address is only used to
    construct), answers GetSchema on loopback with the schema above."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    plugin = subprocess.Popen(
        [sys.executable, str(PLUGIN / "__main__.py"), "127.0.0.1:1"],
        cwd=PLUGIN,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert plugin.stdout is not None
        port = int(plugin.stdout.readline().strip())  # the plugin protocol: the port, on the first line
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            response = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
        assert json.loads(response.schema) == schema()
    finally:
        plugin.kill()  # by its pid: the process this test started
        plugin.wait(timeout=30)
