"""Your own networks, then a wg-mesh between them, in one program and one `pulumi up`.

AWS: a VPC with a public subnet (the gateway's) and a private subnet with its own route table (the workloads').
GCP: a custom-mode network with one subnetwork. The mesh joins them through the outputs of those resources: its
routes land in the private route table, its gateways in the given subnets, and a workload security group admits
the GCP site's ranges. Tested under Pulumi's mocks by test_example.py (README, "Use it from your program").
"""

import pulumi
import pulumi_aws as aws
import pulumi_gcp as gcp

from wg_mesh import Mesh, MeshArgs, SiteArgs

AWS_REGION, AWS_CIDR = "us-east-1", "10.10.0.0/16"
GCP_PROJECT, GCP_REGION, GCP_CIDR = "example-project-1", "europe-west3", "10.20.0.0/16"

# --- your AWS network -------------------------------------------------------------------------------------------
aws_provider = aws.Provider("aws", region=AWS_REGION)
in_aws = pulumi.ResourceOptions(provider=aws_provider)
vpc = aws.ec2.Vpc("vpc", cidr_block=AWS_CIDR, enable_dns_hostnames=True, opts=in_aws)
igw = aws.ec2.InternetGateway("igw", vpc_id=vpc.id, opts=in_aws)
public_table = aws.ec2.RouteTable(
    "public",
    vpc_id=vpc.id,
    routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
    opts=in_aws,
)
public_subnet = aws.ec2.Subnet("public", vpc_id=vpc.id, cidr_block="10.10.0.0/24", opts=in_aws)
aws.ec2.RouteTableAssociation("public", subnet_id=public_subnet.id, route_table_id=public_table.id, opts=in_aws)
private_table = aws.ec2.RouteTable("private", vpc_id=vpc.id, opts=in_aws)
private_subnet = aws.ec2.Subnet("private", vpc_id=vpc.id, cidr_block="10.10.1.0/24", opts=in_aws)
aws.ec2.RouteTableAssociation("private", subnet_id=private_subnet.id, route_table_id=private_table.id, opts=in_aws)

# --- your GCP network -------------------------------------------------------------------------------------------
network = gcp.compute.Network("network", project=GCP_PROJECT, auto_create_subnetworks=False, mtu=1460)
subnetwork = gcp.compute.Subnetwork(
    "subnetwork", project=GCP_PROJECT, region=GCP_REGION, network=network.id, ip_cidr_range=GCP_CIDR
)

# --- the mesh, wired to them --------------------------------------------------------------------------------------
mesh = Mesh(
    "mesh",
    MeshArgs(
        overlay_cidr="10.255.0.0/24",
        sites=[
            SiteArgs(
                name="aws-use1",
                cloud="aws",
                region=AWS_REGION,
                overlay_ip="10.255.0.1",
                cidrs=[AWS_CIDR],
                vpc_id=vpc.id,
                subnet_id=public_subnet.id,  # the gateway needs the internet: the public subnet
                route_table_ids=[private_table.id],  # the workloads' table gets the routes to GCP
            ),
            SiteArgs(
                name="gcp-euw3",
                cloud="gcp",
                project=GCP_PROJECT,
                region=GCP_REGION,
                zone=f"{GCP_REGION}-a",
                overlay_ip="10.255.0.2",
                cidrs=[GCP_CIDR],
                network=network.self_link,
                subnetwork=subnetwork.self_link,
                workload_tags=["app"],  # the mesh admits the AWS site to instances tagged `app`
            ),
        ],
    ),
)

# A workload security group of yours that admits the GCP site (its ranges, from the mesh's outputs).
workloads = aws.ec2.SecurityGroup(
    "workloads",
    vpc_id=vpc.id,
    description="workloads: traffic from the GCP site through the mesh",
    ingress=[
        aws.ec2.SecurityGroupIngressArgs(
            protocol="-1",
            from_port=0,
            to_port=0,
            cidr_blocks=mesh.site_outputs.apply(lambda sites: sites["gcp-euw3"]["cidrs"]),
        )
    ],
    opts=in_aws,
)

pulumi.export("gateway_public_ips", mesh.public_ips)
pulumi.export("aws_gateway_network_interface", mesh.aws_gateways["aws-use1"].network_interface_id)
pulumi.export("gcp_gateway_tag", mesh.gcp_gateways["gcp-euw3"].network_tag)
