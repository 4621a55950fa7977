"""The CLI that guides (issue 23, item 4): --version, NO_COLOR, usage errors (2) apart from config errors (1), a
wrong --stack listing the stacks there are, and examples in every --help that work as printed. In-process: main()."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tests.stacks import stack_files
from wg_mesh import __version__
from wg_mesh.cli import build_parser, initsize, main
from wg_mesh.cli import helptext as clihelp
from wg_mesh.cli.initask import EXISTING
from wg_mesh.cli.initspec import parse_site
from wg_mesh.config.rules import EXISTING_NETWORK_KEYS

REPO = Path(__file__).resolve().parent.parent
# Examples that need root, a gateway or a deployed stack's output: parsed, not run.
NOT_RUN_HERE = {"doctor", "lab"}


@pytest.fixture
def stacks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding the repository's stack files, as the current directory (examples write into it)."""
    for path in (REPO / "Pulumi.yaml", *stack_files()):
        shutil.copy(path, tmp_path / path.name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"wg-mesh {__version__}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["validate", "--stack", "dev", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["validate"], "one of the arguments --stack --file is required"),
        (["bake"], "invalid choice: 'bake'"),
        ([], "the following arguments are required: COMMAND"),
        (["cost", "--tb", "-1"], "argument --tb"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == clihelp.EXIT_USAGE == 2
    assert message in capsys.readouterr().err


def test_a_flag_value_refused_after_parsing_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--set", "nope=1"]) == 2
    assert capsys.readouterr().err.startswith("--set nope=1: no price named 'nope'")


def test_config_errors_exit_1(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (stacks_dir / "Pulumi.bad.yaml").write_text("config:\n  wg-mesh:mesh:\n    overlay_cidr: 10.200.0.0/24\n")
    assert main(["validate", "--stack", "bad"]) == clihelp.EXIT_CONFIG == 1
    assert capsys.readouterr().err == "sites: required\n"


def test_a_wrong_stack_lists_the_stacks_there_are(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["validate"], ["monitoring", "--out", "m"], ["lab"]):
        assert main([*command, "--stack", "pord"]) == 2
        assert capsys.readouterr().err == (
            f"--stack pord: no stack file Pulumi.pord.yaml; the stacks in {stacks_dir}: dev, ha, prod"
            " (did you mean prod?)\n"
        )
    assert not (stacks_dir / "m").exists()


def test_a_wrong_stack_where_there_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Pulumi.yaml").write_text("name: x\n")  # the project file is not a stack
    assert main(["validate", "--stack", "dev"]) == 2
    assert capsys.readouterr().err == (
        f"--stack dev: no stack file Pulumi.dev.yaml; no Pulumi.NAME.yaml in {tmp_path}; pass --file PATH, or run"
        " from the directory with the stack files\n"
    )


def test_a_missing_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--file", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"--file {tmp_path / 'nope.yaml'}: no such stack file\n"


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_the_help_documents_exit_codes_and_no_color() -> None:
    text = build_parser().format_help()
    assert re.search(r"^  1 +the stack's config", text, re.M) and re.search(r"^  2 +usage:", text, re.M)
    assert "NO_COLOR" in text and "--no-color" in text


class Terminal(io.StringIO):
    """stdin as a terminal that answers `wg-mesh init`'s questions."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_has_examples_that_work(
    name: str, stacks_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", Terminal("a:aws:us-east-1:10.10.0.0/16\n\n\nb:static:203.0.113.9:10.9.0.0/24\n\n"))
    command = _commands()[name]
    assert command.formatter_class is argparse.RawDescriptionHelpFormatter
    examples = clihelp.examples(command.epilog or "")
    assert examples, f"`wg-mesh {name} --help` shows no example"
    assert re.search(r"^  \$ (sudo )?wg-mesh ", command.format_help(), re.M)
    for argv in examples:
        assert argv[0] == name
        args = build_parser().parse_args(argv)  # every example parses
        if name in NOT_RUN_HERE or getattr(args, "ha_gateways", None) is not None:
            continue  # needs a deployed stack's output
        if getattr(args, "before", None) is not None:  # needs the stack file as committed: tests/test_plan_cli.py
            continue
        assert main(argv) == 0, (argv, capsys.readouterr().err)


def test_the_main_help_examples_work(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    examples = clihelp.examples(clihelp.MAIN)
    assert len(examples) >= 3
    for argv in examples:
        if "--help" in argv:
            with pytest.raises(SystemExit) as done:
                main(argv)
            assert done.value.code == 0
        else:
            assert main(argv) == 0, (argv, capsys.readouterr().err)


def test_no_color_flag_sets_no_color_for_every_console(stacks_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert main(["validate", "--stack", "dev"]) == 0
    assert "NO_COLOR" not in os.environ
    assert main(["--no-color", "validate", "--stack", "dev"]) == 0
    assert os.environ["NO_COLOR"] == "1"


@pytest.mark.parametrize(("value", "coloured"), [(None, True), ("", True), ("1", False)])
def test_rich_consoles_honour_no_color(value: str | None, coloured: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """no-color.org: present and not empty disables colour. The lab's consoles are made as Console() or
    Console(stderr=True), which read it (and must keep doing so: test_no_console_overrides_colour)."""
    if value is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", value)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system="standard").print("[red]down[/red] [green]up[/green]")
    assert ("\x1b[31m" in out.getvalue()) is coloured


def test_no_console_overrides_colour() -> None:
    """A Console told its colours (no_color=, color_system=, force_terminal=) would ignore NO_COLOR."""
    offenders = []
    for path in [*(REPO / "wg_mesh").rglob("*.py"), *(REPO / "bench").rglob("*.py")]:
        for call in re.findall(r"Console\(([^()]*)\)", path.read_text()):
            if re.search(r"\b(no_color|color_system|force_terminal)\s*=", call):
                offenders.append(f"{path.relative_to(REPO)}: Console({call})")
    assert offenders == []


# --- validate --json -----------------------------------------------------------------------------------------------


def test_validate_json_ok(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--stack", "prod", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == {
        "ok": True,
        "stack": "prod",
        "file": str(stacks_dir / "Pulumi.prod.yaml"),
        "summary": result["summary"],
        "errors": [],
        "warnings": [],
    }
    assert result["summary"].startswith("ok: 3 sites [aws-use1 (aws), gcp-euw3 (gcp), vps-fra (static)]")


def test_validate_json_names_every_field_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mesh = yaml.safe_load((REPO / "Pulumi.prod.yaml").read_text())["config"]["wg-mesh:mesh"]
    mesh["listen_port"] = 99999
    mesh["sites"][2]["cidrs"] = ["10.10.0.1/16"]
    path = tmp_path / "Pulumi.broken.yaml"
    path.write_text(yaml.safe_dump({"config": {"wg-mesh:mesh": mesh}}))
    assert main(["validate", "--file", str(path), "--json"]) == 1
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == {
        "ok": False,
        "stack": None,
        "file": str(path),
        "summary": None,
        "errors": [
            {"path": "listen_port", "message": "99999 is above the maximum 65535"},
            {"path": "sites[2].cidrs[0]", "message": "10.10.0.1/16 has host bits set (did you mean 10.10.0.0/16?)"},
        ],
        "warnings": [],
    }
    # the same problems as the text form prints, one a line
    assert main(["validate", "--file", str(path)]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"{e['path']}: {e['message']}" for e in json.loads(out)["errors"]]


def test_validate_json_of_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config: [unclosed")
    assert main(["validate", "--file", str(path), "--json"]) == 1
    (error,) = json.loads(capsys.readouterr().out)["errors"]
    assert error["path"] == "(document)" and error["message"].startswith("not valid YAML in Pulumi.x.yaml")


def test_validate_json_usage_errors_stay_text(stacks_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--stack", "pord", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("--stack pord: no stack file")


# --- init ----------------------------------------------------------------------------------------------------------


def test_init_writes_a_stack_that_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sites = ["aws-use1:aws:us-east-1:10.10.0.0/16", "gcp-euw3:gcp:europe-west3:10.100.0.0/16,10.101.0.0/16"]
    argv = ["init", "--stack", "corp", "--gcp-project", "proj-1", *(f"--site={s}" for s in sites)]
    assert main([*argv, "--site", "office:static:203.0.113.10:10.50.0.0/24"]) == 0
    mesh = yaml.safe_load((tmp_path / "Pulumi.corp.yaml").read_text())["config"]["wg-mesh:mesh"]
    assert mesh["overlay_cidr"] == "10.200.0.0/24"
    assert [(s["name"], s["cloud"], s["overlay_ip"], s["cidrs"]) for s in mesh["sites"]] == [
        ("aws-use1", "aws", "10.200.0.1", ["10.10.0.0/16"]),
        ("gcp-euw3", "gcp", "10.200.0.2", ["10.100.0.0/16", "10.101.0.0/16"]),
        ("office", "static", "10.200.0.3", ["10.50.0.0/24"]),
    ]
    assert mesh["sites"][0]["region"] == "us-east-1" and mesh["sites"][2]["endpoint"] == "203.0.113.10"
    gcp = mesh["sites"][1]
    assert (gcp["project"], gcp["region"], gcp["zone"]) == ("proj-1", "europe-west3", "europe-west3-a")
    assert main(["validate", "--stack", "corp"]) == 0


def test_init_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Pulumi.corp.yaml").write_text("mine\n")
    argv = ["init", "--stack", "corp", "--site", "a:aws:us-east-1:10.1.0.0/16", "--site", "b:aws:us-east-2:10.2.0.0/16"]
    assert main(argv) == 2
    assert "exists; wg-mesh init never overwrites" in capsys.readouterr().err
    assert (tmp_path / "Pulumi.corp.yaml").read_text() == "mine\n"


@pytest.mark.parametrize(
    ("sites", "code", "message"),
    [
        (["a:aws"], 2, "--site a:aws: expected NAME:CLOUD:WHERE[:CIDR[,CIDR...]]"),
        (["a:aws:us-east-1:10.1.0.0/16:x"], 2, "expected NAME:CLOUD:WHERE[:CIDR[,CIDR...]]"),
        (["a:azure:westeurope:10.1.0.0/16"], 2, "cloud 'azure' is not one of aws, gcp, static"),
        (["a:gcp:europe-west3:10.1.0.0/16"], 2, "a GCP site needs --gcp-project PROJECT"),
        (["a:aws:us-east-1:10.1.0.1/16", "b:aws:us-east-2:10.2.0.0/16"], 1, "sites[0].cidrs[0]: 10.1.0.1/16 has host"),
        (["a:aws:us-east-1:10.1.0.0/16"], 1, "sites: a mesh needs at least two sites, got 1"),
    ],
)
def test_init_refuses_and_writes_nothing(
    sites: list[str], code: int, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--stack", "x", *(f"--site={s}" for s in sites)]) == code
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_init_site_without_networks_leaves_cidrs_to_the_model() -> None:
    """A single host with nothing behind it: no `cidrs` key written; whether the mesh accepts one is the model's."""
    site = parse_site("vps:static:203.0.113.9", "10.200.0.3", None)
    assert site == {"name": "vps", "cloud": "static", "endpoint": "203.0.113.9", "overlay_ip": "10.200.0.3"}


def test_init_asks_in_a_terminal_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO("a:aws:us-east-1:10.1.0.0/16\n"))
    assert main(["init", "--stack", "x"]) == 2
    assert "--site: give one per site" in capsys.readouterr().err and not (tmp_path / "Pulumi.x.yaml").exists()
    monkeypatch.setattr(
        "sys.stdin", Terminal("a:gcp:europe-west3-b:10.1.0.0/16\nproj-2\n\n\nb:static:203.0.113.9:10.9.0.0/24\n\n")
    )
    assert main(["init", "--stack", "x"]) == 0
    out = capsys.readouterr().out
    assert "site 1 (empty to finish): " in out and "GCP project for the GCP sites: " in out and "wrote " in out
    mesh = yaml.safe_load((tmp_path / "Pulumi.x.yaml").read_text())["config"]["wg-mesh:mesh"]
    assert (mesh["sites"][0]["project"], mesh["sites"][0]["zone"]) == ("proj-2", "europe-west3-b")


def test_init_asks_each_cloud_site_for_a_new_or_an_existing_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    answers = [
        "a:aws:us-east-1:10.1.0.0/16",
        "vpc-0abc1234",  # an existing VPC: its subnet and route tables are asked next
        "subnet-0abc1234",
        "rtb-0abc1234, rtb-0def5678",
        "",  # the default size
        "b:gce:europe-west3-b:10.2.0.0/16",  # no such cloud: said, and asked again
        "b:gcp:europe-west3-b:10.2.0.0/16",
        "proj-3",  # the GCP project, asked at the first GCP site
        "",  # a new network: nothing more asked for it
        "",
        "office:static:203.0.113.9",  # a single host: no network questions, no size
        "",
    ]
    monkeypatch.setattr("sys.stdin", Terminal("\n".join(answers) + "\n"))
    assert main(["init", "--stack", "x"]) == 0
    out = capsys.readouterr().out
    assert "cloud 'gce' is not one of aws, gcp, static" in out
    assert "a: existing VPC id" in out and "b: existing network" in out and "office: existing" not in out
    sites = yaml.safe_load((tmp_path / "Pulumi.x.yaml").read_text())["config"]["wg-mesh:mesh"]["sites"]
    assert {k: sites[0].get(k) for k in EXISTING_NETWORK_KEYS["aws"]} == {
        "vpc_id": "vpc-0abc1234",
        "subnet_id": "subnet-0abc1234",
        "route_table_ids": ["rtb-0abc1234", "rtb-0def5678"],
    }
    assert not {*EXISTING_NETWORK_KEYS["gcp"]} & sites[1].keys() and sites[1]["project"] == "proj-3"
    assert "cidrs" not in sites[2]


def test_init_asks_exactly_the_keys_of_an_existing_network() -> None:
    asked = {cloud: tuple(key for key, _, _ in questions) for cloud, questions in EXISTING.items()}
    assert asked == EXISTING_NETWORK_KEYS


def test_an_answer_the_input_ends_on_writes_nothing_and_prints_the_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", Terminal("a:aws:us-east-1:10.1.0.0/16\nvpc-0abc1234\n\n\n"))
    assert main(["init", "--stack", "x"]) == 1  # a VPC without its subnet and route tables: asked again; then EOF
    captured = capsys.readouterr()
    assert "subnet_id: required with vpc_id" in captured.out and not (tmp_path / "Pulumi.x.yaml").exists()
    assert "nothing written. Your answers: wg-mesh init --stack x --site=a:aws:us-east-1:10.1.0.0/16" in captured.err


def test_each_answer_is_checked_when_given_and_asked_again_nothing_typed_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34 item 4: a bad answer is said at once and asked again; the answers before it are kept."""
    monkeypatch.chdir(tmp_path)
    answers = [
        "aws-euw1:aws:eu-west1:10.10.0.0/16",  # not a region: asked again, nothing else lost
        "aws-euw1:aws:eu-west-1:10.10.0.0/16",
        "vpc-0abc1234",
        "",  # an existing network without its subnet: the network asked again
        "",  # then a new network
        "9",  # not a choice: asked again
        "2",  # the second size offered
        "gcp-euw4:gcp:europe-west4-a:10.100.0.0/16",
        "My_Project",  # not a project id: asked again
        "proj-4",
        "",
        "t2a.nope",  # not a GCE machine type
        "",  # the default
        "office:static:dynamic:10.10.128.0/24",  # overlaps aws-euw1: asked again
        "office:static:dynamic:10.50.0.0/24",
        "home:static:dynamic:10.51.0.0/24",  # two dynamic sites: a cloud site relays them (there is one)
        "",
    ]
    monkeypatch.setattr("sys.stdin", Terminal("\n".join(answers) + "\n"))
    assert main(["init", "--stack", "mine"]) == 0
    out = capsys.readouterr().out
    assert "sites[0].region: 'eu-west1' is not an AWS region name" in out
    assert "subnet_id: required with vpc_id" in out
    assert "a number from 1 to" in out
    assert "project: 'My_Project' is not a GCP project id" in out
    assert "instance_type" in out and "t2a.nope" in out
    assert "overlaps sites[0].cidrs[0]" in out
    assert re.search(r"aws-euw1: gateway size.*eu-west-1.*\n.*c6i\.2xlarge .*8 vCPU.*\d+\.\d\d/month  \(default\)", out)
    sites = yaml.safe_load((tmp_path / "Pulumi.mine.yaml").read_text())["config"]["wg-mesh:mesh"]["sites"]
    assert [s["name"] for s in sites] == ["aws-euw1", "gcp-euw4", "office", "home"]
    assert sites[0]["region"] == "eu-west-1" and "vpc_id" not in sites[0]
    chosen = initsize.menu("aws", "eu-west-1").choices[1].instance_type
    assert sites[0]["instance_type"] == chosen and "instance_type" not in sites[1]
    assert sites[1]["project"] == "proj-4" and sites[2]["cidrs"] == ["10.50.0.0/24"]


def test_two_dynamic_sites_wait_for_a_cloud_site_to_relay_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A problem a later site can fix is not this answer's: the second dynamic site is kept, the end waits."""
    monkeypatch.chdir(tmp_path)
    answers = ["office:static:dynamic:10.50.0.0/24", "home:static:dynamic:10.51.0.0/24", "",
               "aws-use1:aws:us-east-1:10.10.0.0/16", "", "", ""]  # fmt: skip
    monkeypatch.setattr("sys.stdin", Terminal("\n".join(answers) + "\n"))
    assert main(["init", "--stack", "edge"]) == 0
    out = capsys.readouterr().out
    assert out.count("are both dynamic") == 1 and "add a site" in out  # said once, at the end of the list
    sites = yaml.safe_load((tmp_path / "Pulumi.edge.yaml").read_text())["config"]["wg-mesh:mesh"]["sites"]
    assert [s["name"] for s in sites] == ["office", "home", "aws-use1"]


def test_the_size_menu_prices_each_choice_in_the_sites_region() -> None:
    menu = initsize.menu("aws", "eu-west-1")
    assert menu.default == "c6i.2xlarge" and menu.choices[0].instance_type == "c6i.2xlarge"
    by_type = {c.instance_type: c.monthly_usd for c in menu.choices}
    assert by_type["c6i.2xlarge"] == pytest.approx(730 * (0.3648 + 0.005))
    assert by_type["c6i.large"] == pytest.approx(730 * (0.0912 + 0.005))
    assert menu.pick("") == "c6i.2xlarge" and menu.pick("0") is None and menu.pick("m7i.large") == "m7i.large"
    uncovered = initsize.menu("aws", "sa-east-1")
    assert all(c.monthly_usd is None for c in uncovered.choices)
    assert "no bundled price for that type in sa-east-1" in uncovered.text("a")


# --- the entry points ----------------------------------------------------------------------------------------------


def test_the_wg_mesh_command_is_the_clis_main() -> None:
    import tomllib
    from importlib import import_module

    from wg_mesh import cli

    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["wg-mesh"]
    module, _, name = target.partition(":")
    assert getattr(import_module(module), name) is cli.main


def test_python_m_wg_mesh_runs_the_cli() -> None:
    """The module entry point itself is the subject here: a subprocess."""
    done = subprocess.run(
        [sys.executable, "-m", "wg_mesh", "--version"], cwd=REPO, capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, f"wg-mesh {__version__}\n", "")


def test_init_sets_any_key_an_existing_network_among_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    sites = ["--site=a:aws:us-east-1:10.1.0.0/16", "--site=b:static:203.0.113.9:10.9.0.0/24"]
    aws = ["--set=a.vpc_id=vpc-0abc1234", "--set=a.subnet_id=subnet-0abc1234"]
    assert main(["init", "--stack", "x", *sites, *aws]) == 1  # an existing network is all three ids or none
    assert "sites[0].route_table_ids: required with vpc_id, subnet_id" in capsys.readouterr().err
    argv = [
        "init",
        "--stack",
        "x",
        *sites,
        *aws,
        "--set=a.route_table_ids=[rtb-0123abcd, rtb-4567abcd]",
        "--set=delivery=live",
    ]
    assert main(argv) == 0
    mesh = yaml.safe_load((tmp_path / "Pulumi.x.yaml").read_text())["config"]["wg-mesh:mesh"]
    assert mesh["delivery"] == "live"
    assert {k: mesh["sites"][0][k] for k in ("vpc_id", "subnet_id", "route_table_ids")} == {
        "vpc_id": "vpc-0abc1234", "subnet_id": "subnet-0abc1234", "route_table_ids": ["rtb-0123abcd", "rtb-4567abcd"],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("value", "message"),
    [("c.vpc_id=vpc-1", "--set c.vpc_id=vpc-1: no site 'c' (the sites: a, b)"), ("a.vpc_id", "expected KEY=VALUE")],
)
def test_init_set_usage_errors(
    value: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    sites = ["--site=a:aws:us-east-1:10.1.0.0/16", "--site=b:static:203.0.113.9:10.9.0.0/24"]
    assert main(["init", "--stack", "x", *sites, f"--set={value}"]) == 2
    assert message in capsys.readouterr().err and list(tmp_path.iterdir()) == []
