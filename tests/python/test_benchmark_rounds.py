"""benchmarks.mnist_step times the in-process devices in turns (--rounds):
each device's counters must cover its own blocks only, and every device
gets all its timed steps."""
from benchmarks import mnist_step


def test_steps_split_into_near_equal_rounds():
    assert mnist_step.blocks(10, 3) == [4, 3, 3]
    assert mnist_step.blocks(300, 5) == [60] * 5
    assert mnist_step.blocks(2, 5) == [1, 1]  # no empty block
    assert sum(mnist_step.blocks(7, 4)) == 7


def test_devices_take_turns_and_count_their_own_blocks():
    import torch_disc

    args = mnist_step.parse_args(["--models", "mlp", "--devices", "cpu,disc,disc-sync",
                                  "--steps", "6", "--warmup", "2", "--rounds", "3",
                                  "--batch-size", "16"])
    was_async = torch_disc._C.is_async()
    torch_disc._C.clear_compile_cache()  # the first disc stepper compiles here
    rows = {r["device"]: r for r in mnist_step.time_model("mlp", args, torch_disc, None)}
    assert list(rows) == ["cpu", "disc", "disc-sync"]
    for row in rows.values():
        assert "error" not in row and row["ms"] > 0 and row["speedup"] > 0
    # The two disc modes run the same graph: the same kernels per step, which
    # a count spanning the other mode's blocks in between would double.
    assert rows["disc"]["launches_per_step"] == rows["disc-sync"]["launches_per_step"] > 0
    assert rows["disc"]["fallbacks"] == rows["disc-sync"]["fallbacks"] == 0
    # Only the first disc stepper compiles; the second finds the graphs cached.
    assert rows["disc"]["compiles"] >= 1 and rows["disc-sync"]["compiles"] == 0
    assert torch_disc._C.is_async() == was_async  # each block restored the mode it found


def test_the_autocast_row_runs_every_device_under_bf16():
    import torch_disc

    assert mnist_step.split_model_name("mlp-bf16") == ("mlp", True)
    assert mnist_step.split_model_name("cnn") == ("cnn", False)
    args = mnist_step.parse_args(["--models", "mlp-bf16", "--devices", "cpu,disc",
                                  "--steps", "2", "--warmup", "1", "--rounds", "1",
                                  "--batch-size", "16"])
    rows = {r["device"]: r for r in mnist_step.time_model("mlp-bf16", args, torch_disc, None)}
    assert all("error" not in r and r["ms"] > 0 for r in rows.values())
    assert rows["disc"]["fallbacks"] == 0 and rows["disc"]["launches_per_step"] > 0


def test_a_crashed_worker_is_named_by_its_signal_not_its_last_warning():
    import signal

    from benchmarks.cli import worker_failure

    warning = "W1205 cpp_extension.py:140] No CUDA runtime is found\n"
    assert worker_failure(-signal.SIGSEGV, warning) == "killed by SIGSEGV"
    assert worker_failure(1, "Traceback\nRuntimeError: boom\n") == "RuntimeError: boom"
    assert worker_failure(3, "") == "exit code 3"
