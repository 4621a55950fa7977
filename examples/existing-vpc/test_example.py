"""The example under Pulumi's mocks (wg_mesh.testing), in preview and in update: the mesh is wired into the program's
own networks. Runs with unittest (CI runs it against the installed wheel, outside the source tree) or pytest."""

import functools
import unittest
from pathlib import Path
from typing import Any

import wg_mesh
from wg_mesh.testing import ProgramRun, Recorded, execute, new_run

PROGRAM = Path(__file__).resolve().parent / "__main__.py"
GCP_CIDR = "10.20.0.0/16"


@functools.cache
def run_example(preview: bool) -> ProgramRun:
    run = execute(new_run(preview), PROGRAM, {}, project="existing-vpc", stack="example")
    assert run.error is None, run.error
    return run


def user_resource(run: ProgramRun, typ: str, name: str) -> Recorded:
    """A resource the example declares itself (no parent component: its URN has no `$`)."""
    return run.named(typ, name)


class ExampleUpdate(unittest.TestCase):
    applied: ProgramRun

    @classmethod
    def setUpClass(cls) -> None:
        cls.applied = run_example(preview=False)

    def test_the_mesh_creates_no_network_of_its_own(self) -> None:
        for typ in ("aws:ec2/vpc:Vpc", "gcp:compute/network:Network", "gcp:compute/subnetwork:Subnetwork"):
            self.assertEqual(len(self.applied.of_type(typ)), 1, typ)
        self.assertEqual(len(self.applied.of_type("aws:ec2/subnet:Subnet")), 2)  # public, private: the program's
        self.assertEqual(len(self.applied.of_type("aws:ec2/routeTable:RouteTable")), 2)

    def test_the_mesh_routes_land_in_the_programs_private_route_table(self) -> None:
        table = user_resource(self.applied, "aws:ec2/routeTable:RouteTable", "private")
        routes = self.applied.of_type("aws:ec2/route:Route")
        self.assertTrue(routes)
        self.assertEqual({r.inputs["routeTableId"] for r in routes}, {table.id})
        self.assertIn(GCP_CIDR, {r.inputs["destinationCidrBlock"] for r in routes})
        (instance,) = self.applied.of_type("aws:ec2/instance:Instance")
        eni = instance.outputs["primaryNetworkInterfaceId"]
        self.assertEqual({r.inputs["networkInterfaceId"] for r in routes}, {eni})

    def test_the_aws_gateway_joins_the_programs_subnet_and_vpc(self) -> None:
        subnet = user_resource(self.applied, "aws:ec2/subnet:Subnet", "public")
        vpc = user_resource(self.applied, "aws:ec2/vpc:Vpc", "vpc")
        (instance,) = self.applied.of_type("aws:ec2/instance:Instance")
        self.assertEqual(instance.inputs["subnetId"], subnet.id)
        gateway_sg = self.applied.named("aws:ec2/securityGroup:SecurityGroup", "aws-use1-sg")
        self.assertEqual(gateway_sg.inputs["vpcId"], vpc.id)

    def test_the_gcp_gateway_joins_the_programs_network(self) -> None:
        network = user_resource(self.applied, "gcp:compute/network:Network", "network")
        subnetwork = user_resource(self.applied, "gcp:compute/subnetwork:Subnetwork", "subnetwork")
        (instance,) = self.applied.of_type("gcp:compute/instance:Instance")
        (nic,) = instance.inputs["networkInterfaces"]
        self.assertEqual(nic["subnetwork"], subnetwork.outputs["selfLink"])
        routes = self.applied.of_type("gcp:compute/route:Route")
        self.assertTrue(routes)
        self.assertEqual({r.inputs["network"] for r in routes}, {network.outputs["selfLink"]})
        firewalls = self.applied.of_type("gcp:compute/firewall:Firewall")
        self.assertEqual({f.inputs["network"] for f in firewalls}, {network.outputs["selfLink"]})
        remote = self.applied.named("gcp:compute/firewall:Firewall", "gcp-euw3-fw-remote")
        self.assertEqual(remote.inputs["targetTags"], ["app"])

    def test_the_workload_security_group_admits_the_remote_site(self) -> None:
        workloads = user_resource(self.applied, "aws:ec2/securityGroup:SecurityGroup", "workloads")
        ingress: list[dict[str, Any]] = workloads.inputs["ingress"]
        self.assertEqual([rule["cidrBlocks"] for rule in ingress], [[GCP_CIDR]])

    def test_typed_outputs_are_exported(self) -> None:
        (instance,) = self.applied.of_type("aws:ec2/instance:Instance")
        exports = self.applied.exports
        self.assertEqual(exports["aws_gateway_network_interface"].value, instance.outputs["primaryNetworkInterfaceId"])
        self.assertEqual(set(exports["gateway_public_ips"].value), {"aws-use1", "gcp-euw3"})
        self.assertTrue(exports["gcp_gateway_tag"].value.startswith("gcp-euw3-wg-gw-"))


class ExamplePreview(unittest.TestCase):
    def test_preview_declares_what_update_does(self) -> None:
        previewed, applied = run_example(preview=True), run_example(preview=False)
        self.assertEqual(
            sorted((r.type, r.name) for r in previewed.resources), sorted((r.type, r.name) for r in applied.resources)
        )
        # In preview the program's route table has no id yet: the routes wait for it, they do not guess.
        for route in previewed.of_type("aws:ec2/route:Route"):
            self.assertNotIn("routeTableId", {k for k, v in route.inputs.items() if isinstance(v, str) and v})


class InstalledPackage(unittest.TestCase):
    def test_which_package_runs(self) -> None:
        """Printed, not asserted: CI checks the path itself (the installed wheel, not the source tree)."""
        print(f"wg-mesh package under test: {Path(wg_mesh.__file__).parent}")


if __name__ == "__main__":
    unittest.main()
