"""The files people expect at the top of a repository agree with `pyproject.toml` and the package."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import REPO_ROOT

import aiayn_cli


@pytest.fixture(scope="module")
def project() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_license_is_the_apache_2_text_that_pyproject_names(project):
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]  # SPDX expression
    text = (REPO_ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert (
        "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS AND CONDITIONS" in text
    )
    assert len(text.splitlines()) > 190  # the whole text, not a pointer to it


def test_citation_names_this_version_the_license_and_the_paper(project):
    citation = yaml.safe_load((REPO_ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0"
    assert citation["version"] == aiayn_cli.__version__
    assert citation["license"] == project["license"]
    assert citation["preferred-citation"]["title"] == "Attention Is All You Need"
    assert citation["preferred-citation"]["year"] == 2017


def test_changelog_keeps_a_changelog_with_this_version():
    text = (REPO_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "Keep a Changelog" in text and "## [Unreleased]" in text
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, flags=re.M)
    assert versions and versions[0] == aiayn_cli.__version__


def test_contributing_names_every_extra_and_the_python_version(project):
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for extra in project["optional-dependencies"]:
        assert f"`{extra}`" in text, f"CONTRIBUTING.md does not name the extra {extra!r} of pyproject.toml"
    assert f"Python {project['requires-python'].removeprefix('>=')} or newer" in text
    assert "Apache License 2.0" in text
