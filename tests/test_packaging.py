"""What `pip install aiayn-cli` ships: every subpackage, the metric modules and the recipes."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _setuptools_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_subpackage_is_listed():
    config = _setuptools_config()
    found = {
        ".".join(init.parent.relative_to(REPO_ROOT).parts)
        for init in (REPO_ROOT / "aiayn_cli").rglob("__init__.py")
        if "metrics/aiayn_" not in init.as_posix()
    }
    assert found | {"aiayn_cli.recipes"} == set(config["packages"])


def test_recipes_are_package_data():
    config = _setuptools_config()
    assert config["package-dir"]["aiayn_cli.recipes"] == "recipes"
    patterns = config["package-data"]["aiayn_cli.recipes"]
    shipped = {p.name for pattern in patterns for p in (REPO_ROOT / "recipes").glob(pattern)}
    assert {"multi30k_en_de.yaml", "tiny.yaml", "quickstart.yaml"} <= shipped


def test_the_public_names_the_readme_uses_import():
    import aiayn_cli
    import aiayn_cli.decoding
    import aiayn_cli.evaluation
    from aiayn_cli import AiaynConfig, AiaynForConditionalGeneration, Translator, metric_path, score

    assert AiaynForConditionalGeneration.config_class is AiaynConfig
    assert Translator is aiayn_cli.decoding.Translator and callable(aiayn_cli.decoding.decode)
    assert score is aiayn_cli.evaluation.score and metric_path("sacrebleu").endswith("aiayn_sacrebleu")
    with pytest.raises(AttributeError):
        aiayn_cli.NoSuchName  # noqa: B018
