"""The MNIST example on disc: loss parity with CPU and accuracy targets, on
the real Fashion-MNIST files the set-up installs."""
import os
import re

import pytest
import torch_disc

from examples.mnist import train
from examples.mnist.data import DEFAULT_DIR

needs_data = pytest.mark.skipif(
    not os.path.exists(os.path.join(DEFAULT_DIR, "train-labels-idx1-ubyte.gz")),
    reason="Fashion-MNIST not installed (scripts/setup.sh installs dataset-fashion-mnist)",
)


def run(device, *extra):
    args = ["--device", device, "--limit", "2000", "--no-progress", "--seed", "0", *extra]
    return train.main(args)


def relative_gap(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


@needs_data
@pytest.mark.parametrize("model,optimizer", [("mlp", "sgd"), ("mlp", "adam"), ("cnn", "adamw")])
def test_disc_matches_cpu_step_by_step(model, optimizer, counters):
    steps = "100" if model == "mlp" else "20"
    extra = ["--model", model, "--optimizer", optimizer, "--max-steps", steps, "--epochs", "4"]
    disc = run("disc", *extra)
    cpu = run("cpu", *extra)
    assert len(disc["losses"]) == len(cpu["losses"]) == int(steps)
    assert relative_gap(disc["losses"], cpu["losses"]) < 1e-4
    c = counters()
    assert c["fallbacks"] == 0, torch_disc.metrics.fallbacks()
    # Train graph: step 1 (state creation), step 2 (steady state); the last,
    # partial batch and the evaluation batches add their own.
    assert c["compiles"] <= 6


@needs_data
@pytest.mark.parametrize("model,autocast", [("mlp", "bf16"), ("mlp", "fp16"), ("cnn", "bf16")])
def test_autocast_training_tracks_cpu_autocast(model, autocast, counters):
    # Equal to float32 rounding for the first steps (bf16: to the bit; fp16
    # GEMMs accumulate in another order than eager's); Adam's f32 update
    # then differs by an ulp now and then, which a 16-bit weight copy can
    # turn into a visible step: over 60 bf16 steps the runs drift apart by
    # up to ~3% (3.2% on an AMX Xeon, whose bf16 GEMMs sum in tiles).
    steps = "60" if model == "mlp" else "15"
    extra = ["--model", model, "--max-steps", steps, "--autocast", autocast]
    disc = run("disc", *extra)
    cpu = run("cpu", *extra)
    assert relative_gap(disc["losses"][:3], cpu["losses"][:3]) < 1e-5
    assert relative_gap(disc["losses"], cpu["losses"]) < 5e-2
    assert disc["losses"][-1] < 0.6 * disc["losses"][0]  # it learns
    assert abs(disc["test_accuracy"] - cpu["test_accuracy"]) < 0.02
    assert counters()["fallbacks"] == 0, torch_disc.metrics.fallbacks()


@needs_data
@pytest.mark.parametrize("model,target", [("mlp", 0.84), ("cnn", 0.87)])
def test_one_epoch_reaches_accuracy_target(model, target, counters):
    result = train.main(["--device", "disc", "--model", model, "--epochs", "1", "--no-progress"])
    assert result["test_accuracy"] >= target
    c = counters()
    assert c["fallbacks"] == 0
    # 1875 training steps: two compiles for training (state creation, steady
    # state), one for the last partial batch... and evaluation's.
    assert c["compiles"] <= 6 and c["cache_hits"] >= 1870


PROGRESS_LINE = re.compile(
    r"^epoch 1/1: step (\d+)/8 \(\d+%\), loss \d+\.\d{4}, \d+ samples/s, \d+\.\d s$")


@needs_data
@pytest.mark.parametrize("every,steps", [("0", list(range(1, 9))), ("1e9", [8])])
def test_a_log_gets_progress_lines_at_a_steady_interval(every, steps, capsys):
    # Under pytest stdout is not a terminal, as in a log file: no bar, a
    # line every --progress-every seconds and one after the last step.
    train.main(["--device", "disc", "--limit", "256", "--max-steps", "8", "--seed", "0",
                "--progress-every", every])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("epoch 1/1:")]
    assert all(PROGRESS_LINE.match(ln) for ln in lines), lines
    assert [int(PROGRESS_LINE.match(ln).group(1)) for ln in lines] == steps
