"""`gcdsl.config`: one truthiness rule for every flag, read once, documented in the README."""
import os
import re
import subprocess

import pytest

from gcdsl import config
from tests.conftest import ROOT

FLAGS = [name for name, f in config.variables().items() if f.metadata["kind"] == "flag"]


@pytest.mark.parametrize("value", [None, "", "0", "false", "False", "NO", "off", " 0 ", "Off\n"])
def test_off_values(value):
    assert config.flag(value) is False


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "2", "anything", " TRUE "])
def test_on_values(value):
    assert config.flag(value) is True


@pytest.mark.parametrize("name", FLAGS)
def test_every_flag_follows_the_rule(name):
    field = config.variables()[name].name
    assert getattr(config.read({name: "off"}), field) is False
    assert getattr(config.read({name: "yes"}), field) is True
    assert getattr(config.read({}), field) is False


def test_text_and_path_values():
    cfg = config.read({"GCDSL_DUMP_DIR": " /tmp/x ", "GCDSL_TEST_DECORATOR": "gcdsl", "GCDSL_GIT_COMMIT": ""})
    assert cfg.dump_dir == "/tmp/x" and cfg.test_decorator == "gcdsl" and cfg.git_commit is None
    assert config.read({}).test_decorator == "cute"


def test_read_once_until_reload(monkeypatch):
    monkeypatch.setenv("GCDSL_DUMP", "1")
    first = config.reload()
    monkeypatch.setenv("GCDSL_DUMP", "0")
    assert config.get() is first and first.dump is True
    assert config.reload().dump is False
    monkeypatch.undo()
    config.reload()


def test_config_is_frozen():
    with pytest.raises(Exception):
        config.get().dump = True


def test_every_gcdsl_variable_is_read_here_and_documented():
    used = set()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for path in tracked or []:
        if path.endswith((".py", ".sh", ".toml")) or "/" not in path and path.endswith(".md"):
            with open(os.path.join(ROOT, path), errors="replace") as f:
                text = f.read()
            used |= set(re.findall(r"\bGCDSL_[A-Z_]*[A-Z]\b", text))
            if path != "gcdsl/config.py":  # reads anywhere else bypass the one rule
                assert not re.search(r"(?:environ\.get|getenv|environ\[)\(?\s*[\"']GCDSL_", text), path
    shell_only = {"GCDSL_BENCH"}  # read by .ci/gpu-host.sh
    assert used, "no GCDSL_* names found: run from a git checkout"
    assert used - shell_only <= set(config.variables()), "a GCDSL_* variable gcdsl.config does not know"
    with open(os.path.join(ROOT, "README.md")) as f:
        table = {m for m in re.findall(r"^\| `(GCDSL_[A-Z_]+)", f.read(), re.M)}
    assert set(config.variables()) | shell_only == table


def _copy_kernel(**options):
    from typing import List

    import cutlass.cute as cute
    import gcdsl

    def copy_kernel(loads: List[cute.CopyAtom], src: cute.Tensor, dst: cute.Tensor, k: int):
        cute.copy(loads[k], src, dst)

    return gcdsl.kernel(**options)(copy_kernel) if options else gcdsl.kernel(copy_kernel)


def test_kernel_takes_its_bounds_check_default_from_config(monkeypatch):
    monkeypatch.setenv("GCDSL_CHECK_BOUNDS", "on")
    config.reload()
    try:
        assert _copy_kernel().check_bounds is True
        assert _copy_kernel(check_bounds=False).check_bounds is False  # the decorator's word wins
        monkeypatch.setenv("GCDSL_CHECK_BOUNDS", "off")
        assert _copy_kernel().check_bounds is True  # read once: no change until reload
        config.reload()
        assert _copy_kernel().check_bounds is False
    finally:
        monkeypatch.undo()
        config.reload()
