"""docs/reference/*.md are generated from the code (refdocs): the committed pages must be what the code renders now,
and every config key must carry a description."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from refdocs import cli_page, config_page, md, metrics_page, pages


def test_the_committed_reference_pages_are_what_the_code_renders() -> None:
    rendered = pages.render_all()
    directory = pages.REPO / pages.DIRECTORY
    stale = [name for name, text in rendered.items() if (directory / name).read_text() != text]
    assert not stale, f"stale: {', '.join(f'{pages.DIRECTORY}/{n}' for n in stale)}; run `{md.COMMAND}` and commit"


def test_a_stale_page_is_named_with_the_command(tmp_path: Path) -> None:
    for name, text in pages.render_all().items():
        (tmp_path / pages.DIRECTORY).mkdir(parents=True, exist_ok=True)
        (tmp_path / pages.DIRECTORY / name).write_text(text)
    assert pages.stale(tmp_path) == []
    (tmp_path / pages.DIRECTORY / "config.md").write_text("edited by hand\n")
    (tmp_path / pages.DIRECTORY / "iam.md").unlink()
    assert pages.stale(tmp_path) == ["config.md", "iam.md"]


def test_a_config_field_without_a_description_fails_the_generator() -> None:
    class Site(BaseModel):
        name: str = Field(description="described")
        zone: str | None = None

    with pytest.raises(config_page.MissingDescription, match=r"Site\.zone has no description"):
        config_page.rows(Site)


def test_every_key_of_the_model_is_on_the_config_page() -> None:
    from wg_mesh.config import AwsSite, GcpSite, MeshConfig, StaticSite
    from wg_mesh.config.quotas import AwsQuotas
    from wg_mesh.config.underlay import PrivatePath

    text = config_page.render()
    models = (MeshConfig, AwsSite, GcpSite, StaticSite, PrivatePath, AwsQuotas)
    missing = [f"{m.__name__}.{n}" for m in models for n in m.model_fields if f"| `{n}` |" not in text]
    assert not missing
    for model in models:
        for name, info in model.model_fields.items():
            assert info.description and info.description.split("`")[0] in text, f"{model.__name__}.{name}"


def test_every_subcommand_and_option_is_on_the_cli_page() -> None:
    text = pages.PAGES["cli.md"]()
    parser = cli_page.build_parser()
    for name, _, sub in cli_page._subcommands(parser):
        assert f"## `{parser.prog} {name}`" in text
        for action in sub._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, f"{name} {flag}"


def test_every_alert_and_metric_is_on_the_metrics_page() -> None:
    from wg_mesh.tools import monitoring

    text = pages.PAGES["metrics.md"]()
    for alert in monitoring.alerts():
        assert f"### {alert.name}" in text and alert.expr.splitlines()[0] in text
    for module, _, _ in metrics_page.EXPORTERS:
        for metric in module.METRICS:
            assert f"| `{metric}` |" in text


def test_nothing_in_the_package_imports_the_generator() -> None:
    package = pages.REPO / "wg_mesh"
    importers = [
        str(path.relative_to(pages.REPO))
        for path in sorted(package.rglob("*.py"))
        if "refdocs" in path.read_text(encoding="utf-8")
    ]
    assert not importers
