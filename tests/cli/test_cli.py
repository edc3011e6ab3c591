"""The CLI skeleton: --help, --version, `python -m aiayn_cli`, the console script."""

import shutil

import pytest
from helpers import run_cli

from aiayn_cli import __version__


def test_help_exits_zero():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "aiayn" in result.stdout


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"aiayn {__version__}"


def test_unknown_command_is_a_usage_error():
    result = run_cli("no-such-command")
    assert result.returncode == 2


@pytest.mark.skipif(shutil.which("aiayn") is None, reason="the console script is not installed")
def test_console_script():
    import subprocess

    result = subprocess.run(["aiayn", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and __version__ in result.stdout


def test_library_errors_name_keys_and_the_cli_names_flags(tmp_path, capsys):
    from aiayn_cli.data.spec import DataSpec
    from aiayn_cli.errors import AiaynError

    with pytest.raises(AiaynError) as error:
        DataSpec(dataset="wmt14", data_dir=str(tmp_path), source_lang="en", target_lang="de").validate()
    assert str(error.value) == "give one data source, not dataset and data_dir"  # the library's own terms
    code, _, err = run_cli("train-tokenizer", "--dataset", "wmt14", "--data-dir", tmp_path,
                            "-s", "en", "-t", "de", "-o", tmp_path / "tok", capsys=capsys)  # fmt: skip
    assert code == 2
    assert err.strip() == "error: give one data source, not --dataset and --data-dir"
    code, _, err = run_cli("train-tokenizer", "--data-dir", tmp_path, "-o", tmp_path / "tok", capsys=capsys)
    assert code == 2
    assert err.strip() == "error: --source-lang and --target-lang are required for this data source"


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_load_neither_torch_nor_transformers(flag):
    import subprocess
    import sys

    from helpers import cli_env

    script = (
        "import sys\n"
        f"sys.argv = ['aiayn', {flag!r}]\n"
        "from aiayn_cli.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'datasets', 'evaluate', 'pyarrow') if m in sys.modules]\n"
        "print('loaded:', ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "loaded:"
