"""The model sweep's quick subset (tests/python/model_sweep.py; the whole
sweep is ``make model-sweep``): one model per kind of architecture and task
head, each trained on disc vs CPU eager and float64 as the sweep does, must
pass; the CPU fallbacks each one still takes are pinned."""
import pytest

import model_sweep

pytest.importorskip("transformers")

# (family, model type or name, task) -> the CPU fallbacks per step (ops
# whose output size depends on the data) and the syncs per step.
QUICK = {
    ("hf", "bert", "masked-lm"): ({}, 1),
    ("hf", "gpt2", "causal-lm"): ({}, 1),
    ("hf", "llama", "seq-cls"): ({}, 1),
    ("hf", "t5", "seq2seq-lm"): ({}, 1),
    ("hf", "qwen3_moe", "causal-lm"): ({}, 1),
    ("hf", "vit", "image-cls"): ({}, 1),
    # CTC: the labels' masked_select, and the lengths ctc_loss reads on the
    # host, computed alone (read_alone); the label check (labels.max()) at
    # the forward's start and the boolean index in the backward sync.
    ("hf", "wav2vec2", "ctc"): ({"aten::masked_select": 1, "aten::index.Tensor": 1}, 3),
    ("torchvision", "mobilenet_v3_small", None): ({}, 1),
    ("timm", "convnext", None): ({}, 1),
}


def case(family, name, task):
    only = {name}
    for full, fam, build in model_sweep.cases([family], only):
        if task is None or full.endswith("/" + task):
            return full, fam, build
    pytest.skip(f"{family} has no {name} {task or ''} here")


@pytest.mark.parametrize("key", list(QUICK), ids=lambda k: "-".join(p for p in k if p))
def test_model_trains_like_cpu(key):
    if key[0] == "timm":
        pytest.importorskip("timm")
    row = model_sweep.run_case(*case(*key))
    assert row["status"] == "pass", row
    steps = model_sweep.STEPS
    fallbacks, syncs = QUICK[key]
    assert {op: n // steps for op, n in row["fallbacks"].items()} == fallbacks, row["fallbacks"]
    assert row["steady_syncs"] == syncs
    assert row["steady_compiles"] == 0
