"""What `pip install aiayn-cli` ships: every subpackage, the metric modules and the recipes; and no two
of its modules import each other."""

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _setuptools_config() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_subpackage_is_listed():
    """Every folder of Python files, the metrics' folders without __init__.py too (setuptools warns
    about a folder it would import but is not told to ship)."""
    config = _setuptools_config()
    found = {
        ".".join(module.parent.relative_to(REPO_ROOT).parts)
        for module in (REPO_ROOT / "aiayn_cli").rglob("*.py")
        if "__pycache__" not in module.parts
    }
    assert found | {"aiayn_cli.recipes"} == set(config["packages"])


def test_the_license_is_an_spdx_expression():
    """setuptools >= 77 deprecates the `{ text = ... }` table, with a warning on every install."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]


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


def _module_imports() -> dict[str, set[str]]:
    """Each module of aiayn_cli -> the modules of aiayn_cli it imports when it is imported (module-level
    imports; those inside functions and under `if TYPE_CHECKING:` run later or never)."""
    files = {}
    for path in (REPO_ROOT / "aiayn_cli").rglob("*.py"):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parents = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parents + ([node.module] if node.module else []))
                imported.update(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names
                )
        graph[module] = {name for name in imported if name in files and name != module}
    return graph


def test_no_import_circle_in_the_package():
    """A module that imports another which imports it back (directly or round a longer circle) is named."""
    graph = _module_imports()
    assert len(graph) > 50 and "aiayn_cli.decoding.search" in graph["aiayn_cli.decoding.torch_engine"]
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            pytest.fail("import circle: " + " -> ".join(path[path.index(module) :] + [module]))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
