"""The CLI's help texts: what `wg-mesh --help` and each command's `--help` print after the options.

Every line of an EXAMPLES block that starts with `  $ ` (with its continuation lines) is a command that works as
printed (tests/test_cli_guide.py parses every one and runs the ones that need no root, no gateway and no deployed
stack)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CONFIG = 1  # the stack's config (or a file it reads) is invalid; a check failed (doctor, lab)
EXIT_USAGE = 2  # argparse's own code: an unknown flag, a missing or bad argument

MAIN = """\
exit status:
  0    done; the config is valid
  1    the stack's config, or a file the command reads, is invalid (every problem is printed, one a line,
       field path first); doctor and lab: a check failed
  2    usage: an unknown command or flag, a missing or bad argument (a --stack or --file that is not there,
       a bad --tb or --set); lab: cannot run here (not root, missing tools)
  130  interrupted

environment:
  NO_COLOR   set and not empty: no colour in any output (https://no-color.org); --no-color does the same

examples:
  $ wg-mesh init --stack corp --site aws-use1:aws:us-east-1:10.10.0.0/16 \\
      --site office:static:203.0.113.10:10.50.0.0/24
  $ wg-mesh validate --stack corp
  $ wg-mesh render --stack corp --site office
  $ wg-mesh plan --stack corp
  $ wg-mesh cost
  $ wg-mesh validate --help
"""

VALIDATE = """\
Reads Pulumi.STACK.yaml (or --file) and checks it the way `pulumi up` would, before any resource: every problem
is printed, one a line, field path first. Nothing is created and no cloud is asked.

examples:
  $ wg-mesh validate --stack dev
  $ wg-mesh validate --file Pulumi.prod.yaml
  $ wg-mesh validate --stack prod --json
"""

RENDER = """\
Prints what a site's gateway is given, as the program renders it: its wg0.conf and its cloud-init user data. The
WireGuard keys are generated for this display (the real ones live in the stack's Pulumi state, never in a file) and
are masked unless --show-secrets; AWS and GCP gateways' public addresses are stand-ins until pulumi up.

examples:
  $ wg-mesh render --stack dev --site aws-use1
  $ wg-mesh render --stack prod --site vps-fra --part wg0.conf
  $ wg-mesh render --stack dev --site gcp-euw3 --show-secrets
"""

PLAN = """\
Runs the program on the stack's config under Pulumi's mocks (no cloud account, no Pulumi CLI) and lists, per site,
every resource `pulumi up` creates and which input changes replace it: the program's replace_on_changes, AWS's
user_data_replace_on_change and the provider's force-new inputs (wg_mesh/plan/forcenew.py). With --before, the
earlier config runs too and the two are compared as Pulumi's engine compares a program with its state, following
aliases (a renamed site's previous_names): created, deleted, replaced (which inputs; create-before-delete or
delete-before-create), updated in place, and per site what traffic sees. Secret inputs are compared by digest and
never printed.

examples:
  $ wg-mesh plan --stack dev
  $ wg-mesh plan --stack prod --site vps-fra --json
  after editing Pulumi.dev.yaml, what the edit does (`git show HEAD:Pulumi.dev.yaml > old.yaml` first):
  $ wg-mesh plan --stack dev --before old.yaml
"""

MONITORING = """\
examples:
  $ wg-mesh monitoring --stack prod --out monitoring/
  after `pulumi stack output ha_gateways --json > ha.json` on a stack with HA sites:
  $ wg-mesh monitoring --stack ha --out monitoring/ --ha-gateways ha.json
"""

DOCTOR = """\
Runs on a gateway, as root (it reads WireGuard's state and the routes). On a gateway with nothing but python3, the
same check is `sudo python3 -m wg_mesh.gateway.doctor` (see the README, "Doctor").

examples:
  $ sudo wg-mesh doctor
  $ sudo wg-mesh doctor --interface wg0 --json
  $ sudo wg-mesh doctor --dynamic-silence 3600
"""

COST = """\
examples:
  $ wg-mesh cost
  $ wg-mesh cost --tb 5 50 --direction aws-to-gcp
  $ wg-mesh cost --set aws_interconnect_link=1.5 --json
"""

LAB = """\
Needs root (network namespaces). sudo's PATH may not hold your venv's: `sudo "$(command -v wg-mesh)" lab ...`,
or from a checkout `sudo .venv/bin/python -m wg_mesh lab ...`.

examples:
  $ sudo wg-mesh lab --stack dev
  $ sudo wg-mesh lab --stack prod --drill live --json live.json
  $ sudo wg-mesh lab down --all
"""


INIT = """\
Writes Pulumi.STACK.yaml for the sites given, checked as `wg-mesh validate` checks it first: an invalid one is not
written, and an existing file is never overwritten. With no --site and stdin a terminal, the sites are asked for
one by one, each AWS or GCP site whether it joins an existing network (and its ids) and its gateway size, with each
size's monthly price in the site's region; every answer is checked when it is given and asked again if wrong, and if
the input ends first, the answers are printed as the one command that gives them again. WHERE is an AWS region, a
GCP zone (a region: its zone -a) or a static site's public IPv4 (`dynamic`: a site with no fixed address, behind a
NAT or on a dynamic IP; a DNS name: a site its peers resolve); --set gives any other key: an existing network (AWS:
SITE.vpc_id, SITE.subnet_id, SITE.route_table_ids; GCP: SITE.network, SITE.subnetwork), an instance type, the
delivery.

examples:
  $ wg-mesh init --stack corp --site aws-use1:aws:us-east-1:10.10.0.0/16 \\
      --site office:static:203.0.113.10:10.50.0.0/24
  $ wg-mesh init --stack two --gcp-project my-project --site aws-use1:aws:us-east-1:10.10.0.0/16 \\
      --site gcp-euw3:gcp:europe-west3-a:10.100.0.0/16
  $ wg-mesh init --stack edge --site aws-use1:aws:us-east-1:10.10.0.0/16 \\
      --site office:static:dynamic:10.50.0.0/24
  $ wg-mesh init --stack mine --site aws-use1:aws:us-east-1:10.10.0.0/16 \\
      --site office:static:203.0.113.10:10.50.0.0/24 --set delivery=live \\
      --set aws-use1.vpc_id=vpc-0abc1234 --set aws-use1.subnet_id=subnet-0abc1234 \\
      --set aws-use1.route_table_ids=[rtb-0abc1234]
  $ wg-mesh init --stack asked
"""


def examples(epilog: str) -> list[list[str]]:
    """The commands of an EXAMPLES block, each as argv after `wg-mesh` (a leading `sudo` dropped; a line ending in
    a backslash goes on on the next, as in a shell)."""
    commands = []
    lines = iter(epilog.splitlines())
    for line in lines:
        if line.startswith("  $ "):
            while line.endswith("\\"):
                line = line[:-1] + next(lines).strip()
            words = line[4:].split()
            if words[0] == "sudo":
                words = words[1:]
            commands.append(words[1:])
    return commands
