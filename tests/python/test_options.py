"""torch_disc.options: every DISC_* option declared once, parsed one way,
settable in-process, and documented in docs/env_vars.md as declared."""
import os
import re
import subprocess
import sys

import pytest

import torch
import torch_disc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def documented():
    """name -> default column of every DISC_* row in docs/env_vars.md."""
    text = open(os.path.join(ROOT, "docs", "env_vars.md")).read()
    return dict(re.findall(r"^\| `(DISC_[A-Z0-9_]+)` \| ([^|]+?) \|", text, re.M))


def test_docs_and_the_registry_list_the_same_options_with_the_same_defaults():
    declared = {o["name"]: o["default"] for o in torch_disc.options.describe()}
    docs = documented()
    assert sorted(docs) == sorted(declared)
    for name, default in declared.items():
        assert docs[name] == (f"`{default}`" if default else "unset"), name


def test_only_the_options_module_reads_the_environment():
    # C++: getenv only in runtime/options.cpp. Python: no DISC_* read from
    # os.environ in the package (tests and scripts may set them for children).
    readers = []
    for folder in ("lowering", "runtime", "lazy_backend", "tools", "tests/cpp"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                path = os.path.join(dirpath, f)
                if f.endswith((".cpp", ".h")) and "getenv" in open(path).read():
                    readers.append(os.path.relpath(path, ROOT))
    assert readers == ["runtime/options.cpp"]
    for dirpath, _, files in os.walk(os.path.join(ROOT, "python", "torch_disc")):
        for f in files:
            if f.endswith(".py"):
                assert not re.search(r"environ(\.get)?[\[(]\s*['\"]DISC_", open(os.path.join(dirpath, f)).read()), f


def test_values_parse_one_way_and_bad_ones_name_the_variable():
    before = torch_disc.options.get("DISC_GEMM_MERGE")
    try:
        for text, want in [("off", False), ("TRUE", True), ("0", False), (True, True)]:
            torch_disc.options.set("DISC_GEMM_MERGE", text)
            assert torch_disc.options.get("DISC_GEMM_MERGE") is want
        with pytest.raises(ValueError, match="DISC_GEMM_MERGE='yes'.*0/1/false/true/off/on"):
            torch_disc.options.set("DISC_GEMM_MERGE", "yes")
        with pytest.raises(ValueError, match="DISC_CONV='nhcw'.*nhwc, nchw, aten"):
            torch_disc.options.set("DISC_CONV", "nhcw")
        with pytest.raises(ValueError, match="unknown option 'DISC_NOPE'"):
            torch_disc.options.get("DISC_NOPE")
    finally:
        torch_disc.options.set("DISC_GEMM_MERGE", before)


def test_a_bad_environment_value_fails_at_import_naming_it():
    env = dict(os.environ, DISC_DEBUG_COMPILE="2", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", "import torch_disc"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "DISC_DEBUG_COMPILE='2'" in out.stderr


def test_debug_compile_0_is_off():
    # Once, a set variable switched it on whatever its value.
    code = ("import torch, torch_disc\n"
            "(torch.ones(3, device='disc') + 1).cpu()\n")
    env = dict(os.environ, DISC_DEBUG_COMPILE="0", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "[disc] compile" not in out.stderr


def test_override_sets_for_the_block_and_a_compile_option_recompiles(counters):
    x = torch.randn(16, 16)
    (x.to("disc") * 2).cpu()
    assert torch_disc.options.get("DISC_EXECUTOR") == "compiled"
    with torch_disc.options.override(DISC_EXECUTOR="reference"):
        assert torch_disc.options.get("DISC_EXECUTOR") == "reference"
        (x.to("disc") * 2).cpu()
    assert torch_disc.options.get("DISC_EXECUTOR") == "compiled"
    assert counters()["compiles"] == 2  # the cache was cleared: the same graph compiled again
