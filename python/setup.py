"""Builds the wheel: the runtime library and the `tvmrt` tool from the Rust workspace one level up
(`cargo build --release`, or prebuilt ones from TVMRT_PREBUILT_DIR), stripped, beside the Python
package, and `tvmrt._fast` (tvmrt/_fast.c: a request's call made from C, over CPython's stable
ABI for 3.9 and later). The package calls the library through ctypes where that module cannot
load (free-threaded builds, PyPy), so one wheel serves CPython 3.9 to 3.13 and those too: its tag
stays py3-none-<platform>. The module is optional where the package is built from source (no
Python headers: ctypes alone, said in the build's output); TVMRT_REQUIRE_FAST_CALLS=1, as the
release build sets, makes it required. The version is the workspace's (Cargo.toml)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from distutils.command.build_scripts import build_scripts  # setuptools ships distutils
from pathlib import Path
from typing import ClassVar

from setuptools import Command, Extension, setup
from setuptools.command.build import build
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

HERE = Path(__file__).parent.resolve()
# The Rust workspace: inside the source archive (rust/, scripts/build_release.sh puts it there),
# else beside the package, as in a clone.
REPO = HERE / "rust" if (HERE / "rust" / "Cargo.toml").is_file() else HERE.parent
# Where the tool is staged for setuptools' scripts (the wheel's .data/scripts: on PATH once installed).
STAGED_TOOL = Path("build") / "rust" / "tvmrt"
# The library keeps upstream's file name (TVM's own Python finds it by that name in
# TVM_LIBRARY_PATH) in a folder of its own, and gets a soname of its own: a process that also loads
# TVM's runtime never resolves one for the other (the package loads it by path, RTLD_LOCAL).
LIB_NAME = "libtvm_runtime.so"
SONAME = "libtvmrt_runtime.so"


def cargo_version() -> str:
    if not (REPO / "Cargo.toml").is_file():
        # The package's folder without the workspace: its own record of the version, if any (the
        # build then says what it needs).
        info = HERE / "PKG-INFO"
        found = re.search(r"^Version:\s*(\S+)", info.read_text(), re.M) if info.is_file() else None
        return found.group(1) if found else "0+unknown"
    text = (REPO / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0] if "[workspace.package]" in text else ""
    m = re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)
    if not m:
        raise RuntimeError("no [workspace.package] version in Cargo.toml")
    return m.group(1)


def target() -> str | None:
    return os.environ.get("CARGO_BUILD_TARGET") or None


def tool(name: str) -> str | None:
    """A binutils tool for the target (aarch64-linux-gnu-strip when cross-building), if there is
    one: the host's own does not read another architecture's files."""
    t = target()
    machine = os.uname().machine
    if t and not t.startswith(machine):
        cross = f"{t.split('-')[0]}-linux-gnu-{name}"
        return cross if shutil.which(cross) else None
    return name if shutil.which(name) else None


NO_BUILD = """
tvmrt: cannot build the runtime library here: {why}.

Two ways to get tvmrt:
  - a release wheel, which needs nothing else (Linux x86_64 or aarch64, glibc 2.28+, CPython 3.9 to 3.13):
      pip install tvmrt                   (from the first release on), or a wheel file:
      pip install tvmrt-<version>-py3-none-manylinux_2_28_<arch>.whl
  - a build from a clone of the repository (the Rust workspace beside python/), which needs Rust
    1.82 or later (https://rustup.rs: curl --proto '=https' -sSf https://sh.rustup.rs | sh) and a
    C and C++ compiler (Debian/Ubuntu: apt-get install build-essential); then
      pip install ./python          (a few minutes on 2 cores; pip -v shows cargo's progress)
"""


def check_can_build() -> None:
    """Fails at once, saying what to do, where the library cannot be built (no workspace, as in
    a copy of the package's folder alone; no cargo; no C++ compiler), rather than minutes later
    with a raw error."""
    if not (REPO / "Cargo.toml").is_file() or not (REPO / "src").is_dir():
        why = f"the Rust sources are not beside this package ({REPO} holds no Cargo.toml)"
    elif shutil.which("cargo") is None:
        why = "cargo (Rust's build tool) is not on PATH"
    elif not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
        why = "no C++ compiler (c++, g++ or clang++) is on PATH"
    else:
        return
    raise SystemExit(NO_BUILD.format(why=why))


def run_visibly(cmd: list[str]) -> None:
    """Runs cargo where its progress can be seen: pip captures a build's output (shown only with
    -v), so when there is a terminal, cargo writes to it directly."""
    note = "tvmrt: building the runtime library and the tool with cargo (a few minutes on 2 cores)\n"
    try:
        tty = open("/dev/tty", "w")
    except OSError:
        tty = None
    try:
        if tty is not None and not sys.stderr.isatty():
            tty.write(note)
            tty.flush()
            subprocess.check_call(cmd, cwd=REPO, stderr=tty)
        else:
            sys.stderr.write(note)
            subprocess.check_call(cmd, cwd=REPO)
    finally:
        if tty is not None:
            tty.close()


class BuildRust(Command):
    """Builds the runtime library and the tool (or takes them from TVMRT_PREBUILT_DIR)."""

    description = "build the Rust runtime library and the tvmrt tool"
    user_options: ClassVar[list] = []

    def initialize_options(self):
        self.build_lib = None

    def finalize_options(self):
        self.set_undefined_options("build", ("build_lib", "build_lib"))

    def run(self):
        prebuilt = os.environ.get("TVMRT_PREBUILT_DIR")
        if prebuilt:
            out = Path(prebuilt)
        else:
            check_can_build()
            cmd = ["cargo", "build", "--release", "-p", "tvm-runtime", "-p", "tvmrt"]
            if target():
                cmd += ["--target", target()]
            run_visibly(cmd)
            target_dir = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
            out = target_dir / (target() or "") / "release"
        lib = Path(self.build_lib) / "tvmrt" / "_lib" / LIB_NAME
        lib.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "libtvm_runtime.so", lib)
        STAGED_TOOL.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "tvmrt", STAGED_TOOL)
        os.chmod(STAGED_TOOL, 0o755)
        strip = tool("strip")
        for f in (lib, STAGED_TOOL):
            if strip:
                subprocess.check_call([strip, "--strip-unneeded", str(f)])
        if shutil.which("patchelf"):
            subprocess.check_call(["patchelf", "--set-soname", SONAME, str(lib)])


class BuildScripts(build_scripts):
    """The tool is a binary: copied as it is (setuptools would read it as a Python script)."""

    def run(self):
        self.mkpath(self.build_dir)
        dest = Path(self.build_dir) / STAGED_TOOL.name
        shutil.copyfile(STAGED_TOOL, dest)
        os.chmod(dest, 0o755)


class Build(build):
    sub_commands: ClassVar[list] = [("build_rust", None), *build.sub_commands]


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    """py3-none-<platform>: the package's extension module is optional (see the top), and the
    library it loads is the same for every interpreter."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        t = target()
        if t:
            plat = "linux_" + t.split("-")[0]
        return "py3", "none", plat


FAST_CALLS = Extension(
    "tvmrt._fast",
    ["tvmrt/_fast.c"],
    py_limited_api=True,  # the file defines Py_LIMITED_API (3.9) itself
    extra_compile_args=["-O2"],
    optional=os.environ.get("TVMRT_REQUIRE_FAST_CALLS") != "1",
)

setup(
    version=cargo_version(),
    ext_modules=[FAST_CALLS],
    cmdclass={"build_rust": BuildRust, "build": Build, "build_scripts": BuildScripts, "bdist_wheel": BdistWheel},
    distclass=BinaryDistribution,
    scripts=[str(STAGED_TOOL)],
)
