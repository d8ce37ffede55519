"""Sharded training on disc beyond test_distributed.py's: FSDP2 with mixed
precision, sequence parallelism in a tensor-parallel transformer block,
distributed checkpoints of tensor-parallel models, and ranks that disagree
on how to shard. Ranks are processes (dist_sharding_cases.py) over Gloo on
127.0.0.1."""
import functools

import pytest

import torch_disc
from tests.python import dist_cases, dist_sharding_cases
from tests.python.dist_models import batches, build_model, sp_losses, sp_model, train
from tests.python.test_distributed import close, ok

pytestmark = pytest.mark.skipif(not torch_disc.distributed.register(),
                                reason="torch without distributed / Gloo support")

launch = functools.partial(dist_cases.launch, module=dist_sharding_cases.MODULE)

# bfloat16 keeps 8 significant bits: one rounding of the logits moves a
# cross-entropy of ~2.3 by up to about 2^-8 of itself. Two programs that
# round at other points (a fused epilogue, another GEMM's accumulation
# order) may differ by that much; a wrong cast or reduction is off by far
# more (float32 and bf16 runs part by ~5e-4 over these steps).
BF16_REL = 2.0 ** -8


def test_fsdp2_mixed_precision_matches_cpu_gloo():
    """fully_shard with MixedPrecisionPolicy(param_dtype=bf16,
    reduce_dtype=f32) on a disc mesh: the per-step losses are the same
    program's on CPU tensors under plain Gloo, and near one float32 process;
    the Linears compute in bf16 from bf16 all-gathers, gradients are
    reduce-scattered in f32, and the sharded parameters and gradients stay
    f32 between steps."""
    steps, world, per_rank = 6, 2, 4
    args = {"steps": steps, "per_rank": per_rank}
    disc = ok(launch("fsdp2_mixed_precision", world, dict(args, device="disc")))
    cpu = ok(launch("fsdp2_mixed_precision", world, dict(args, device="cpu", backend="gloo")))
    model = build_model("mlp", seed=0)
    f32 = [loss.item() for loss in train(model, "mlp", batches("mlp", steps, world * per_rank),
                                         "cpu")]
    for r in disc:
        close(r["losses"], cpu[0]["losses"], BF16_REL)
        close(r["losses"], f32, BF16_REL)
        assert r["computed"] == [["torch.bfloat16"] * 3]  # weight, input, output
        assert r["collectives"] == {"all_gather_into_tensor": ["torch.bfloat16"],
                                    "reduce_scatter_tensor": ["torch.float32"]}
        assert r["kept"] == ["grad torch.float32", "param torch.float32 torch.float32"]
        assert r["fallbacks"] == 0
        # The casts and collectives ride the step's own sync.
        assert r["syncs"] == {"sync.optimizer_step": steps}
    assert disc[0]["computed"] == cpu[0]["computed"]


def test_sequence_parallel_transformer_block_matches_one_process():
    """A pre-norm transformer block under tensor parallelism with
    SequenceParallel LayerNorms on 2 ranks: q, k, v and the MLP's first
    Linear split by columns, the attention's output and the MLP's second by
    rows reduce-scattered onto the sequence split, the stream all-gathered
    into each block. The per-step losses of AdamW are one process's."""
    steps, world = 5, 2
    results = ok(launch("sp_train", world, {"steps": steps}))
    model = sp_model()
    want = sp_losses(model, "cpu", steps)
    replicated = sum(p.numel() for name, p in model.named_parameters()
                     if "norm" in name or name in ("inp.bias", "block.attn.o.bias",
                                                   "block.mlp.2.bias"))
    for r in results:
        close(r["losses"], want, 1e-5)
        # Each LayerNorm ran on this rank's 4 of the 8 positions.
        assert r["normed"] == [[4, 4, 32]]
        assert r["local_params"] == (r["params"] - replicated) // world + replicated
        assert r["fallbacks"] == 0
        # DTensor's collectives ride the step's graph: one sync a step.
        assert r["syncs"] == {"sync.optimizer_step": steps}


def test_tensor_parallel_distributed_checkpoint_resumes_bit_identically(tmp_path):
    """torch.distributed.checkpoint saves the sequence-parallel model's
    DTensor state and its AdamW state from disc after 3 of 6 steps; a fresh
    parallel model from other weights loads it and trains on exactly as the
    run that never stopped (Adam's moments and step count came back too);
    the full state dict, gathered to the CPU, loads into an unsharded model
    that computes what the parallel one does."""
    results = ok(launch("tp_checkpoint", 2, {"steps": 6, "stop": 3, "path": str(tmp_path / "ckpt")}))
    for r in results:
        assert r["resumed"] == r["straight"]
        assert r["full_on_cpu"] and r["full_loads"]


# What each rank runs first when rank 0 shards one way and rank 1 another.
DISAGREE = {
    "tp_vs_none": ("scatter (root 0) of 1536 Float elements",  # distributing layer 0
                   "all_reduce (sum) of 1 Float elements"),  # the logged loss
    "fsdp_units": ("all_gather of 800 Float elements",  # layer 0's half
                   "all_gather of 1125 Float elements"),  # the whole model's
    "fsdp_mesh_size": ("all_gather of 1125 Float elements",
                       "all_reduce (sum) of 1 Float elements")}  # its mesh is itself


@pytest.mark.parametrize("fault", sorted(DISAGREE))
def test_ranks_that_shard_differently_fail_naming_both(fault):
    """Rank 0 splits the Linears and rank 1 does not; FSDP2 units per layer
    on rank 0 and one at the root on rank 1; FSDP2 over both ranks on rank 0
    and over rank 1 alone on rank 1. Each rank fails, within seconds, naming
    what both ranks ran."""
    results = launch("sharding_disagrees", 2, {"fault": fault, "timeout": 30}, timeout=120)
    for rank, (status, result) in enumerate(results):
        assert status == "ok", result
        assert result["error"] is not None, f"rank {rank} trained on: {result}"
        assert "ranks disagree" in result["error"]
        for what in DISAGREE[fault]:
            assert what in result["error"]
        assert result["seconds"] < 20


def test_layers_split_the_other_way_fail_not_hang():
    """Rank 0 splits layer 0 by columns and layer 2 by rows, rank 1 the
    other way: rank 1's DTensor finds the local shapes do not multiply,
    before any collective runs; rank 0, waiting in the scatter that
    distributes its weights, fails when rank 1's process ends."""
    results = launch("sharding_disagrees", 2, {"fault": "colwise_vs_rowwise", "timeout": 30},
                     timeout=120)
    (s0, r0), (s1, r1) = results
    assert s0 == s1 == "ok", results
    assert "Sharding propagation failed" in r1["error"]
    assert "scatter" in r0["error"] and "failed on rank 0" in r0["error"]
    assert r0["seconds"] < 20
