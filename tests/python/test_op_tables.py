"""Op facts live in tables: lowering/ops.def (the compiler's),
lazy_backend/trace/aten_ops.def (tracing's) and
lazy_backend/accelerator/autocast_ops.def (autocast's policy). Checks the
tables against themselves, against PyTorch's registrations, and that no other
source file grows op facts of its own (string literals naming "aten::" ops)."""
import os
import re

import torch

import torch_disc  # noqa: F401  registers the disc kernels

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATEN_OPS = os.path.join(ROOT, "lazy_backend", "trace", "aten_ops.def")

# Files that still name aten ops in code, and why that is not a second table.
NAMED_OUTSIDE_TABLES = {
    # The op each view kernel / node builder records: the node's identity.
    "lazy_backend/trace/view_kernels.cpp": 12,
    "lazy_backend/trace/node_builder.cpp": 8,
    # Its own table: ops whose CPU kernel runs widened.
    "lazy_backend/exec/widened_dtypes.cpp": 1,
    # _grouped_mm's operands handed to its kernel with aligned strides.
    "lazy_backend/exec/replay.cpp": 1,
    # An error message naming the op.
    "lazy_backend/trace/shape_rules.cpp": 1,
}

ROW = re.compile(r'^ATEN_OP\("([^"]+)",\s*(\w+),\s*(\w+(?:\(\w+\))?),\s*(\w+),\s*(\w+(?:\("[^"]*"\))?)\)',
                 re.M)


def rows():
    text = open(ATEN_OPS).read()
    text = re.sub(r"\n\s+", " ", text)  # rows wrapped over two lines
    return [m.groups() for m in ROW.finditer(text)]


def code_without_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def test_table_parses_and_names_each_op_once():
    names = [r[0] for r in rows()]
    body = [l for l in open(ATEN_OPS) if l.startswith("ATEN_OP(")]
    assert len(names) == len(body) > 100
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]


def test_columns_asked_by_schema_name_are_on_rows_without_overload():
    # sizes and host are looked up by schema name: a value on an overload's
    # row would never be read.
    for name, sizes, _, _, host in rows():
        if "." in name:
            assert sizes == "EXACT" and host == "DEVICE", name


def test_every_shape_function_exists():
    source = open(os.path.join(ROOT, "lazy_backend", "trace", "shape_rules.cpp")).read()
    for name, _, shapes, _, _ in rows():
        m = re.match(r"(RULE|META_THEN)\((\w+)\)", shapes)
        if m:
            assert re.search(rf"\b{m.group(2)}\(", source), (name, shapes)


def test_whole_rows_are_registered_for_disc():
    whole = [r[0] for r in rows() if r[3] == "WHOLE"]
    assert len(whole) == 8
    for name in whole:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"), name


def test_host_rows_run_on_the_cpu_fallback():
    x = torch.tensor([0.0, 2.0, 0.0, 3.0]).to("disc")
    before = torch_disc.metrics.counters().get("fallback.aten::nonzero", 0)
    assert torch.nonzero(x).cpu().flatten().tolist() == [1, 3]
    assert torch_disc.metrics.counters()["fallback.aten::nonzero"] == before + 1


def test_no_source_file_names_aten_ops_outside_the_tables():
    found = {}
    for top in ("lazy_backend", "lowering", "runtime", "autograd", "tools"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                n = len(re.findall(r'"aten::\w', code_without_comments(open(path).read())))
                if n:
                    found[os.path.relpath(path, ROOT)] = n
    assert found == NAMED_OUTSIDE_TABLES


AUTOCAST_ROW = re.compile(r"^AUTOCAST_(?:OP\((\w+), (\w+)\)|OVERLOAD\((\w+), (\w+), (\w+)\))$", re.M)


def autocast_rows():
    text = open(os.path.join(ROOT, "lazy_backend", "accelerator", "autocast_ops.def")).read()
    for m in AUTOCAST_ROW.finditer(text):
        op, policy = (m.group(1), m.group(2)) if m.group(1) else (m.group(3) + "." + m.group(4), m.group(5))
        yield op, policy


def test_autocast_rows_are_registered_for_disc():
    rows = list(autocast_rows())
    assert len(rows) == 126
    assert {p for _, p in rows} == {"lower_precision_fp", "fp32", "promote"}
    for op, _ in rows:
        assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + op, "AutocastPrivateUse1"), op
    # An op in no row falls through: runs in the dtypes it is given.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "AutocastPrivateUse1")
