#!/usr/bin/env python3
"""Runs the recipes of docs/*.md as written, the way a reader on one machine would.

A fenced block after `<!-- recipe: start -->` is a device-side command started in the background
(it must say it listens before the next recipe runs; it is stopped with SIGTERM at the end); one
after `<!-- recipe: run -->` (or `<!-- recipe: run, expect: TEXT -->`) runs to completion (Python
blocks with TVM 0.16's Python from scripts/tvm_env.sh on this runtime, shell blocks in bash) and
must exit 0 and print TEXT when given. Each page runs in a scratch folder holding what a reader
copies to the device (`tvmrt`, `libtvm_runtime.so`) and a model as `deploy/` (the bundled MLP's
fixture). One change is made to the text: the device's and host's addresses in the examples
(0.0.0.0, 192.168.x.y) become 127.0.0.1, since tests listen on and talk to loopback only.

    scripts/doc_recipes.py            (after cargo build --release and eval "$(scripts/tvm_env.sh)")
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from process_group import stop_group

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPE = re.compile(r"<!-- recipe: (start|run)(?:, expect: (.*?))? -->\n```([a-z]*)\n(.*?)```", re.S)
ADDRESS = re.compile(r"\b(?:0\.0\.0\.0|192\.168\.\d+\.\d+)\b")
# How long a started server may take to say it listens.
START_TIMEOUT_S = 30


def scratch_for(page: str) -> str:
    """A folder with what the page's reader has: the tool and library, a model as deploy/."""
    folder = tempfile.mkdtemp(prefix="doc-recipe-")
    release = os.path.join(REPO, "target", "release")
    for name in ("tvmrt", "libtvm_runtime.so"):
        shutil.copy2(os.path.join(release, name), folder)
    shutil.copytree(os.path.join(REPO, "tests", "fixtures", "mlp_b1"), os.path.join(folder, "deploy"))
    return folder


def python_env() -> dict:
    env = dict(os.environ, TVM_FFI="ctypes", TVM_USE_RUNTIME_LIB="1",
               TVM_LIBRARY_PATH=os.path.join(REPO, "target", "release"))
    env["PYTHONPATH"] = os.environ["TVM_WHEEL_DIR"]
    return env


def start(body: str, folder: str) -> subprocess.Popen:
    proc = subprocess.Popen(["bash", "-c", body.strip()], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "rpc-server: key" in line:
            port = re.search(r":(\d+),", line)
            wanted = re.search(r"--port (\d+)", body)
            if port and wanted and port.group(1) != wanted.group(1):
                stop_group(proc)
                raise RuntimeError(f"port {wanted.group(1)} is taken here; the server took {port.group(1)}")
            return proc
    stop_group(proc)
    raise RuntimeError(f"the started command never said it listens: {body.strip()}")


def run_page(page: str) -> tuple[int, int]:
    text = open(page).read()
    recipes = RECIPE.findall(text)
    if not recipes:
        return 0, 0
    folder = scratch_for(page)
    started: list[subprocess.Popen] = []
    failed = 0
    try:
        for kind, expect, lang, body in recipes:
            body = ADDRESS.sub("127.0.0.1", body)
            first = body.strip().splitlines()[0 if kind == "start" else -1]
            if kind == "start":
                started.append(start(body, folder))
                print(f"{os.path.basename(page)}: started: {first}")
                continue
            if lang == "python":
                cmd, env = [os.environ["TVM_PYTHON"], "-c", body], python_env()
            else:
                cmd, env = ["bash", "-euo", "pipefail", "-c", body], dict(os.environ)
            done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or (expect and expect not in done.stdout):
                failed += 1
                print(f"{os.path.basename(page)}: FAILED (exit {done.returncode}, expected {expect!r}): {first}")
                print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
            else:
                print(f"{os.path.basename(page)}: ok: {first}")
    finally:
        for proc in started:
            stop_group(proc)
        shutil.rmtree(folder, ignore_errors=True)
    return len(recipes), failed


def main() -> None:
    if "TVM_PYTHON" not in os.environ:
        sys.exit('doc recipes: eval "$(scripts/tvm_env.sh)" first')
    total = failed = 0
    for page in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        n, bad = run_page(page)
        total, failed = total + n, failed + bad
    print(f"doc recipes: {total}, {failed} failed")
    if total == 0:
        sys.exit("doc recipes: none found (the markers changed?)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
