"""torch.distributed on disc: collectives recorded into graphs, DDP training
equal to one process on the whole batch, and failures that end in errors,
not hangs. Ranks are processes (dist_cases.py) over Gloo on 127.0.0.1."""
import os
import subprocess
import sys

import pytest
import torch

import torch_disc
from tests.python import dist_cases
from tests.python.dist_cases import launch
from tests.python.dist_models import batches, build_model, tp_losses, tp_model, train

pytestmark = pytest.mark.skipif(not torch_disc.distributed.register(),
                                reason="torch without distributed / Gloo support")


def ok(results):
    for rank, (status, result) in enumerate(results):
        assert status == "ok", f"rank {rank}: {status}: {result}"
    return [result for _, result in results]


def one_process_losses(kind, steps, global_batch, accumulate=1):
    """The reference: one process on the concatenated batches, on disc."""
    model = build_model(kind, seed=0).to("disc")
    losses = train(model, kind, batches(kind, steps, global_batch), "disc", accumulate)
    return [loss.item() for loss in losses]


def close(got, want, rel):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= rel * abs(w), f"step {i}: {g} vs {w}"


def test_collectives_match_cpu_on_odd_sizes_and_dtypes():
    for result in ok(launch("collectives", 2)):
        assert result["mismatches"] == []
        # Every collective was a graph node, checked across ranks once.
        assert result["recorded"] == result["checks"] > 100
        assert result["fallbacks"] == 0


@pytest.mark.parametrize("kind", ["mlp", "bert"])
def test_ddp_matches_one_process_and_cpu(kind, tmp_path):
    steps, world, per_rank = 20, 2, 4
    ckpt = str(tmp_path / "rank0.pt")
    disc = ok(launch("ddp_train", world, {"kind": kind, "device": "disc", "steps": steps,
                                          "per_rank": per_rank, "checkpoint": ckpt}))
    cpu = ok(launch("ddp_train", world, {"kind": kind, "device": "cpu", "steps": steps,
                                         "per_rank": per_rank}))
    want = one_process_losses(kind, steps, world * per_rank)
    for r in disc:
        close(r["losses"], want, 1e-5)
        close(r["losses"], cpu[0]["losses"], 1e-5)
        # DDP's bucket all-reduces ride in the step's graph: no sync of their
        # own. find_unused_parameters (the MLP has an unused layer) reads on
        # the host which parameters some rank used: one read a step.
        extra = {"to_cpu": 1.0} if kind == "mlp" else {}
        assert r["syncs_per_step"] == {**r["plain_syncs_per_step"], **extra}
        assert r["fallbacks"] == 0
        assert r["checkpoint_matches"]
    # The rank-0 checkpoint loads on CPU too.
    cpu_model = build_model(kind, seed=7)
    cpu_model.load_state_dict(torch.load(ckpt, map_location="cpu"))


@pytest.mark.parametrize("variant", [{}, {"reshard": False}, {"accumulate": 2}, {"checkpoint": True}],
                         ids=["per-layer", "no-reshard", "accumulate", "checkpoint"])
def test_fsdp2_matches_one_process(variant):
    """fully_shard on disc: parameters sharded over 2 ranks, all-gathered
    per layer, gradients reduce-scattered; the losses are one process's,
    with parameters kept unsharded after the forward, with gradient sync
    off for all but the last micro-batch, and with activation
    checkpointing inside the sharded layers."""
    steps, world, per_rank = 6, 2, 4
    accumulate = variant.get("accumulate", 1)
    results = ok(launch("fsdp2_train", world, {"kind": "mlp", "device": "disc", "steps": steps,
                                               "per_rank": per_rank, **variant}))
    want = one_process_losses("mlp", steps, world * per_rank, accumulate)
    for r in results:
        close(r["losses"], want, 1e-5)
        assert r["fallbacks"] == 0
        # FSDP2's events (several per layer) ride the step's own sync.
        assert r["syncs"] == {"sync.optimizer_step": steps // accumulate}
        assert r["local_params"] * world == r["params"]  # every dim 0 splits evenly here


def test_fsdp2_distributed_checkpoint_resumes_bit_identically(tmp_path):
    """torch.distributed.checkpoint saves FSDP2's sharded model and optimizer
    state from disc; a fresh sharded model loads it and trains on exactly as
    the run that never stopped; the full state dict, gathered to the CPU,
    loads into an unsharded model."""
    results = ok(launch("fsdp2_checkpoint", 2, {"steps": 6, "stop": 3, "path": str(tmp_path / "ckpt")}))
    for r in results:
        assert r["resumed"] == r["straight"]
        assert r["full_on_cpu"] and r["full_loads"]


def test_tensor_parallel_matches_one_process():
    """ColwiseParallel / RowwiseParallel on a disc mesh: DTensor distributes
    the weights (scatter), runs the local matmuls and all-reduces the row
    split's partial sums; the losses are one process's, each rank holding
    about half the parameters."""
    steps, world = 5, 2
    results = ok(launch("tp_train", world, {"device": "disc", "steps": steps}))
    model = tp_model()
    want = tp_losses(model, torch.optim.SGD(model.parameters(), lr=0.05), "cpu", steps)
    for r in results:
        close(r["losses"], want, 1e-5)
        assert r["fallbacks"] == 0
        # Both weights and the first bias split; the last bias is replicated.
        assert r["local_params"] == (r["params"] - 10) // world + 10


def test_fsdp2_times_tensor_parallel_on_a_2d_mesh():
    """4 processes, a (dp 2, tp 2) disc mesh: FSDP2 shards the tensor-parallel
    weights over dp; the losses are one process's on the whole batch."""
    steps = 4
    results = ok(launch("fsdp_tp_train", 4, {"steps": steps}))
    model = tp_model()
    want = tp_losses(model, torch.optim.SGD(model.parameters(), lr=0.05), "cpu", steps)
    for r in results:
        close(r["losses"], want, 1e-5)


@pytest.mark.parametrize("kind", ["mlp", "bert"])
def test_ddp_four_processes(kind):
    steps, world, per_rank = 20, 4, 2
    results = ok(launch("ddp_train", world, {"kind": kind, "device": "disc", "steps": steps,
                                             "per_rank": per_rank}))
    want = one_process_losses(kind, steps, world * per_rank)
    for r in results:
        close(r["losses"], want, 1e-5)


def test_ddp_resnet_with_batchnorm_buffers_and_many_buckets():
    # torchvision's ResNet-18 (SiLU): BatchNorm statistics are per rank, so
    # the reference is DDP itself in float64 on CPU; disc's error against it
    # must stay within a small factor of eager float32's (test_model_zoo's
    # rule). 1 MB buckets: DDP all-reduces ~45 of them a step.
    args = {"kind": "resnet", "steps": 4, "per_rank": 8, "bucket_cap_mb": 1, "pin_syncs": False}
    disc = ok(launch("ddp_train", 2, dict(args, device="disc")))
    cpu32 = ok(launch("ddp_train", 2, dict(args, device="cpu")))
    cpu64 = ok(launch("ddp_train", 2, dict(args, device="cpu", dtype="float64")))
    want = cpu64[0]["losses"]

    def error(got):
        return max(abs(g - w) / abs(w) for g, w in zip(got, want))

    assert error(disc[0]["losses"]) <= max(8 * error(cpu32[0]["losses"]), 1e-5)
    assert disc[0]["losses"] == disc[1]["losses"]
    assert disc[0]["fallbacks"] == 0


def test_ddp_gradient_as_bucket_view_and_static_graph():
    # Gradients that are views of DDP's buckets, and the static-graph mode.
    steps, world, per_rank = 8, 2, 4
    results = ok(launch("ddp_train", world, {"kind": "bert", "device": "disc", "steps": steps,
                                             "per_rank": per_rank, "bucket_view": True,
                                             "static_graph": True}))
    want = one_process_losses("bert", steps, world * per_rank)
    for r in results:
        close(r["losses"], want, 1e-5)
        assert r["syncs_per_step"] == r["plain_syncs_per_step"]


def test_no_sync_accumulation_matches_one_process():
    steps, world, per_rank = 12, 2, 4
    results = ok(launch("ddp_train", world, {"kind": "mlp", "device": "disc", "steps": steps,
                                             "per_rank": per_rank, "accumulate": 3}))
    want = one_process_losses("mlp", steps, world * per_rank, accumulate=3)
    for r in results:
        close(r["losses"], want, 1e-5)


def test_a_dead_rank_fails_the_others_within_the_timeout():
    results = launch("rank_dies", 2, {"timeout": 20}, timeout=120)
    status, result = results[0]
    assert status == "ok", result
    assert result["error"] is not None, "the collective did not fail"
    assert "disc:" in result["error"]
    assert result["seconds"] < 60


def test_ranks_calling_different_collectives_fail_not_hang():
    for status, result in launch("mismatch", 2, {"timeout": 30}, timeout=120):
        assert status == "ok", result
        assert result["error"] is not None
        assert "ranks disagree" in result["error"]
        assert "all_reduce (sum) of 7 Float elements" in result["error"]
        assert "broadcast (root 0) of 7 Float elements" in result["error"]


def test_ranks_sending_other_shapes_fail_naming_both():
    """Equal element counts, other shapes: a [4, 8] block is no [8, 4] one."""
    for status, result in launch("mismatch", 2, {"timeout": 30, "shapes": True}, timeout=120):
        assert status == "ok", result
        assert result["error"] is not None and "ranks disagree" in result["error"]
        assert "all_gather of 32 Float elements shaped [1, 4, 8]" in result["error"]
        assert "all_gather of 32 Float elements shaped [1, 8, 4]" in result["error"]


def test_a_failed_graph_of_collectives_is_undone_without_running_one_again():
    # Both ranks all-reduce a, then disagree on b: the graph holding both
    # fails. Reading b again raises the same error; no collective runs again
    # (two checks: a's and b's, once each), and a keeps its value from
    # before the step rather than one reduced again.
    for status, result in launch("failed_after_a_collective", 2, {"timeout": 30}, timeout=120):
        assert status == "ok", result
        first, again = result["errors"]
        assert first is not None and "ranks disagree" in first and again == first
        assert result["checks"] == 2
        assert result["a"] == [1.0] * 7


def test_destroying_the_group_runs_its_recorded_collectives_first():
    world = 2
    results = ok(launch("leave_with_pending", world, {"timeout": 30}, timeout=120))
    for r in results:
        assert r["reduced"] == [3.0, 3.0, 3.0]
    assert results[0]["gathered"] == [0.0, 0.0, 1.0, 1.0]


def test_bad_collective_inputs_give_clear_errors():
    [result] = ok(launch("bad_inputs", 1))
    errors = result["errors"]
    assert "does not support dtype Short" in errors["int16"]
    assert "does not support dtype Bool" in errors["bool"]
    assert "on cpu and disc" in errors["mixed"]
    assert "AVG needs a floating dtype" in errors["avg_int"]
    assert errors["gloo_group"] is not None  # c10d's own: no backend for disc there
    assert result["after"] == [1.0, 1.0, 1.0]


@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"),
                    reason="the Fashion-MNIST files (Debian's dataset-fashion-mnist)")
def test_torchrun_two_nodes_train_the_mnist_example(tmp_path):
    """Two torchrun launchers, one process each, meeting at one rendezvous
    endpoint on loopback: the two-machine path."""
    port = dist_cases.free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    logs = [tmp_path / f"node{n}.json" for n in range(2)]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--node-rank", str(n), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--rdzv-id", "disc-test", "examples/mnist/train.py", "--device", "disc", "--limit", "512",
         "--max-steps", "6", "--no-progress", "--log-losses", str(logs[n])],
        cwd=dist_cases.ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for n in range(2)]
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            outputs.append(p.communicate()[0])
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    import json

    losses = json.loads(logs[0].read_text())  # rank 0's: the mean over both ranks
    assert len(losses) == 6 and all(0 < loss < 10 for loss in losses)
    assert not logs[1].exists()
    assert "samples/s" in outputs[0] and "samples/s" not in outputs[1]


def test_ddp_benchmark_runs():
    # A smoke test of benchmarks.ddp_step: its figures mean nothing here.
    out = subprocess.run([sys.executable, "-m", "benchmarks.ddp_step", "--steps", "3", "--warmup", "1",
                          "--backends", "cpu,disc"], cwd=dist_cases.ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith(("| cpu", "| disc"))]
    assert len(rows) == 2 and "failed" not in out.stdout, out.stdout
