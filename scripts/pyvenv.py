"""The virtual environments of the Python tools in scripts/ (under target/): `setup` creates one
and installs its pinned packages, skipping what is there; `enter` re-executes the calling script
with the venv's Python when the running one lacks the packages."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path


def setup(venv: Path, packages: list[str], modules: list[str], note: str = "") -> None:
    """Creates `venv` and installs `packages` unless `modules` already import there."""
    python = venv / "bin" / "python3"
    if not python.exists():
        print(f"creating {venv}", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    probe = "import " + ", ".join(modules)
    if subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0:
        print(f"{venv}: ready", file=sys.stderr)
        return
    print(f"installing {' '.join(packages)}{f' ({note})' if note else ''}", file=sys.stderr)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    print(f"{venv}: installed {' '.join(packages)}", file=sys.stderr)


def enter(venv: Path, modules: list[str], script: str) -> None:
    """Returns when `modules` import here; else re-executes `script` with the venv's Python,
    or exits saying how to create the venv."""
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return
    python = venv / "bin" / "python3"
    if python.exists() and Path(sys.prefix).resolve() != venv.resolve():
        os.execv(str(python), [str(python), str(Path(script).resolve()), *sys.argv[1:]])
    sys.exit(
        f"{'/'.join(modules)} missing; run `python3 {Path(script).name} --setup` (creates {venv})"
    )
