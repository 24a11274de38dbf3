"""Serve's prepared-params files without a Ray instance: named by exactly what is loaded, kept in a
folder of the user's own, verified before use (a damaged file is made again, never mapped as it
is), removed once no replica holds them. Needs ``tvmrt[serve]`` (skipped without Ray)."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time

import numpy as np
import pytest
from conftest import FIXTURES, load

pytest.importorskip("ray")

import tvmrt
from tvmrt.serve import _prepared, default_prepared_dir, prepare_builds, private_dir

B1, B8 = FIXTURES / "mlp_unbound_b1", FIXTURES / "mlp_unbound_b8"


def make(builds, folder):
    path = _prepared.prepared_file([str(b) for b in builds], str(folder))
    made, holding = _prepared.ensure_prepared(
        path, lambda tmp: prepare_builds([str(b) for b in builds], "cpu", tmp, [None] * len(builds))
    )
    return path, made, holding


def test_one_file_per_content_made_once_and_verified(tmp_path, caplog):
    folder = tmp_path / "prepared"
    path, made, holding = make([B1, B8], folder)
    assert made and path.is_file()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    again, made_again, h2 = make([B1, B8], folder)
    assert again == path and not made_again, "found, verified, used"
    # One flipped bit in a weight: never mapped as it is, made again under the lock.
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x10
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ray.serve"):
        _, remade, h3 = make([B1, B8], folder)
    assert remade, "a damaged prepared file was used"
    assert "not usable" in caplog.text
    assert _prepared.check(path) is None
    f1 = load("mlp_unbound_b1")
    m = tvmrt.Model(B1, params=path, map_params=True)
    assert m.run(f1.inputs)[0].tobytes() == f1.outputs[0].tobytes()
    # Cut short: made again too.
    path.write_bytes(path.read_bytes()[:1000])
    _, remade, h4 = make([B1, B8], folder)
    assert remade
    for h in (holding, h2, h3, h4):
        h.release()


@pytest.mark.parametrize("params_name", ["params.bin", "deploy_param.params", "model.params"])
def test_the_name_follows_the_weights_whatever_file_holds_them(tmp_path, params_name):
    a = tmp_path / "a" / "mlp"
    shutil.copytree(B1, a)
    if params_name != "params.bin":
        (a / "params.bin").rename(a / params_name)
    first = _prepared.prepared_file([str(a)], str(tmp_path / "p"))
    # Other weights in the same file name: another prepared file.
    weights = tvmrt.load_params(a / params_name)
    (a / params_name).write_bytes(tvmrt.save_params({k: v * 2 for k, v in weights.items()}))
    second = _prepared.prepared_file([str(a)], str(tmp_path / "p"))
    assert first != second
    # A model of the same folder name elsewhere, with other weights: not the same file either.
    b = tmp_path / "b" / "mlp"
    shutil.copytree(B1, b)
    assert _prepared.prepared_file([str(b)], str(tmp_path / "p")) not in (second,)
    # A library that carries its weights: its bytes name the file.
    lib_only = tmp_path / "c" / "mlp_b1"
    shutil.copytree(FIXTURES / "mlp_b1", lib_only)
    key = _prepared.prepared_file([str(lib_only)], str(tmp_path / "p"))
    (lib_only / "graph.json").unlink()
    assert _prepared.prepared_file([str(lib_only)], str(tmp_path / "p")) != key


def test_the_folder_is_the_users_own(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with pytest.raises(tvmrt.InvalidValueError, match="writable by others"):
        private_dir(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(tvmrt.InvalidValueError, match="not a folder"):
        private_dir(link)
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        with pytest.raises(tvmrt.InvalidValueError, match="owned by user 65534"):
            private_dir(theirs)
    assert default_prepared_dir().endswith(f"tvmrt-prepared-{os.getuid()}")


def test_files_nobody_holds_are_removed(tmp_path):
    folder = tmp_path / "p"
    kept, _, holding = make([B1], folder)
    old, _, old_holding = make([B8], folder)
    # Nobody holds the old one any more, and it was made long ago.
    old_holding.release()
    past = time.time() - 3600
    os.utime(old, (past, past))
    held_elsewhere, _, still = make([B1, B8], folder)
    os.utime(held_elsewhere, (past, past))
    removed = _prepared.remove_unused(folder, keep=kept)
    assert removed == [old.name], removed
    assert kept.is_file() and held_elsewhere.is_file() and not old.exists()
    holding.release()
    still.release()
    assert np.__version__
