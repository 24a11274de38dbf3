#!/usr/bin/env python3
"""Runs the snippets of the README, the docs pages and the package's README as written, from the
repository's root, page after page in the order a reader follows them (a later page may use what
an earlier one made: docs/compile.md's model, python/README.md's venv).

A fenced block right after a line naming a file in bold code (**`FILE`**, what a reader sees as
its name) is written to FILE; one after `<!-- snippet: run -->` (or `<!-- snippet: run, expect:
TEXT -->`) runs in bash, stops at the first failing command, and must print TEXT when given. The
files the snippets create are removed after; the script refuses to start where one of them exists
already (it is not ours to overwrite).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARK = re.compile(
    r"(?:<!-- snippet: (run)(?:, expect: (.*?))? -->|\*\*`([^`\n]+)`\*\*)\n```[a-z]*\n(.*?)```", re.S)
# What the run snippets leave besides the files written (the programs they build).
BUILT = [
    "app",
    "my_model",
    ".venv-tvmrt",
    "my_vm_model",
    "rows5.npy",
    "build-install",
    "my_prefix",
    "build-example",
    "libmy_plugin.so",
]
# The pages, in reading order; any other page with a snippet is an error (it would never run).
PAGES = [
    "README.md",
    "docs/compile.md",
    "docs/tool.md",
    "docs/c.md",
    "docs/cpp.md",
    "docs/memory.md",
    "docs/tvm-python.md",
    "docs/dynamic-shapes.md",
    "docs/extensions.md",
    "python/README.md",
    "docs/serving.md",
    "docs/opencl.md",
    "docs/profiling.md",
    "docs/platforms.md",
]
# The files the README's tvmrt examples write (tvmrt/tests/readme.rs runs them elsewhere; a reader
# running them here gets these, which .gitignore lists).


def main():
    snippets = []
    for page in PAGES:
        text = open(os.path.join(REPO, page)).read()
        snippets += [(run or name, expect, body) for run, expect, name, body in MARK.findall(text)]
    stray = [
        os.path.relpath(p, REPO)
        for p in glob.glob(os.path.join(REPO, "docs", "*.md"))
        if os.path.relpath(p, REPO) not in PAGES and MARK.search(open(p).read())
    ]
    if stray:
        sys.exit(f"readme snippets: {', '.join(stray)} hold snippets but are not in PAGES")
    files = [name for name, _, _ in snippets if name != "run"]
    clash = [f for f in files + BUILT if os.path.exists(os.path.join(REPO, f))]
    if clash:
        sys.exit(f"readme snippets: {', '.join(clash)} exist in {REPO}; move them away first")
    failed = 0
    # The serving snippet's node-local prepared files go to a folder of the run's, not the
    # machine's shared default (/tmp/tvmrt-prepared).
    prepared = tempfile.mkdtemp(prefix="readme-prepared-")
    env = dict(os.environ, TVMRT_PREPARED_DIR=prepared)
    try:
        for name, expect, body in snippets:
            if name != "run":
                with open(os.path.join(REPO, name), "w") as f:
                    f.write(body)
                continue
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=REPO, env=env, capture_output=True,
                                  text=True)
            first = body.strip().splitlines()[-1]
            if done.returncode != 0 or (expect and expect not in done.stdout):
                failed += 1
                print(f"FAILED (exit {done.returncode}, expected {expect!r}): snippet ending in: {first}")
                print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
            else:
                print(f"ok: {first}  ->  {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}")
    finally:
        shutil.rmtree(prepared, ignore_errors=True)
        for f in files + BUILT:
            path = os.path.join(REPO, f)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    print(f"readme snippets: {len(snippets)} ({len(files)} files), {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
