"""Fetch transformers' common model tests from the release's source distribution on PyPI, pinned.

    python tests/transformers_common/fetch.py           # download the sdist, verify, (re)write the files
    python tests/transformers_common/fetch.py --check   # offline: verify the files here against the pins

The tests never download anything: the files are kept in this folder (Apache-2.0, as the release ships
them; `LICENSE` is the release's), and this script is how they got here and how to move to another
release (change VERSION, run it, and it prints the new pins to paste below).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "5.25.0"
SDIST_SHA256 = "9120226c6bf170d69abc3029036799bb5d48e552f7127646a529a5c9309812e2"
# path in the sdist (under transformers-VERSION/) -> sha256 of the file
FILES = {
    "LICENSE": "77fd4710def9ec3c0f6225800e0235f15a425abd4a8b03559127fcd782612049",
    "tests/test_modeling_common.py": "b76190b86d67b334d474eb2d043dfa695caf45a3ceab68bc08ebf4280784abb4",
    "tests/test_configuration_common.py": "a8ac6455ff1bc085c147de71930a3bf57eb4e1ff880102ccaa627477b1f111e4",
}
HERE = Path(__file__).resolve().parent


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def local_path(member: str) -> Path:
    return HERE / Path(member).name


def download_sdist(folder: Path) -> Path:
    """`pip download` of the sdist (PyPI through pip's own configuration), its sha256 checked."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
    subprocess.run([*command, f"transformers=={VERSION}", "-d", str(folder)], check=True)
    (sdist,) = folder.glob(f"transformers-{VERSION}.tar.gz")
    if sha256(sdist.read_bytes()) != SDIST_SHA256:
        raise SystemExit(f"{sdist.name}: sha256 {sha256(sdist.read_bytes())} is not the pinned {SDIST_SHA256}")
    return sdist


def fetch() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(download_sdist(Path(tmp))) as sdist:
            for member, pinned in FILES.items():
                data = sdist.extractfile(f"transformers-{VERSION}/{member}").read()
                if sha256(data) != pinned:
                    raise SystemExit(f"{member}: sha256 {sha256(data)} in the sdist is not the pinned {pinned}")
                local_path(member).write_bytes(data)
                print(f"wrote {local_path(member).relative_to(HERE.parent.parent)} ({member}, sha256 {pinned[:12]})")


def check() -> list[str]:
    """The files here that are missing or differ from the pins (one line each; empty when all match)."""
    problems = []
    for member, pinned in FILES.items():
        path = local_path(member)
        if not path.is_file():
            problems.append(f"{path.name}: missing (python tests/transformers_common/fetch.py)")
        elif sha256(path.read_bytes()) != pinned:
            problems.append(f"{path.name}: differs from transformers {VERSION}'s {member}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the files here against the pins (offline)")
    if parser.parse_args().check:
        problems = check()
        print("\n".join(problems) or f"transformers {VERSION}: {len(FILES)} files match their pins")
        raise SystemExit(1 if problems else 0)
    fetch()


if __name__ == "__main__":
    main()
