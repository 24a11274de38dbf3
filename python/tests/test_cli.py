"""The `tvmrt` tool the wheel installs: on PATH beside the interpreter, runs a model."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import FIXTURES

import tvmrt


def tool() -> str:
    beside = Path(sys.executable).parent / "tvmrt"
    found = str(beside) if beside.exists() else shutil.which("tvmrt")
    assert found, "tvmrt is not installed beside the interpreter nor on PATH"
    return found


def test_the_tool_is_installed_and_runs_a_model():
    exe = tool()
    v = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True)
    assert v.stdout.strip() == f"tvmrt {tvmrt.__version__}"
    out = subprocess.run(
        [exe, "run", str(FIXTURES / "mlp_b1"), "--repeat", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "TVM_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stderr
    assert "output_0: float32 [1,10]" in out.stdout, out.stdout
