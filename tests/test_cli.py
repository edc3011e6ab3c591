"""The CLI skeleton: --help, --version, `python -m aiayn_cli`, the console script."""

import shutil

import pytest
from conftest import run_cli

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
