"""Mixture-of-experts layers on disc, as transformers runs them on an
accelerator: integer ``histc`` counts the tokens per expert, ``_grouped_mm``
multiplies each expert's tokens by its weights, with the group offsets read
as data. Models built from configs (random weights, no download) train like
CPU eager with one sync per step, no CPU fallback, and no new compile when
the routing changes from step to step.
"""
import pytest
import torch

import torch_disc
from torch_disc import metrics

transformers = pytest.importorskip("transformers")

COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def mixtral():
    return transformers.MixtralForCausalLM(
        transformers.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **COMMON))


def qwen2_moe():
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, **COMMON))


def qwen3_moe():
    return transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=8, **COMMON))


def train(build, device, steps):
    """Losses of AdamW steps with clipping; every step draws new tokens, so
    the experts' token counts change. Counters of the steps after the
    first two (the first AdamW step traces another graph than the rest)."""
    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tokens = torch.Generator().manual_seed(1)
    losses, before = [], None
    for step in range(steps):
        if step == 2 and device == "disc":
            torch_disc.sync()
            before = (metrics.counters(), metrics.syncs())
        ids = torch.randint(0, COMMON["vocab_size"], (2, 16), generator=tokens).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, before


@pytest.mark.parametrize("build", [mixtral, qwen2_moe, qwen3_moe], ids=lambda b: b.__name__)
def test_moe_model_trains_like_cpu(build):
    steps = 5
    expected, _ = train(build, "cpu", steps)
    metrics.reset()
    losses, (counters, syncs) = train(build, "disc", steps)
    assert losses == pytest.approx(expected, rel=1e-5)
    after = metrics.counters()
    assert metrics.fallbacks() == {}
    assert after["compiles"] == counters["compiles"], "new routing must not recompile"
    steady_syncs = {k: v - syncs.get(k, 0) for k, v in metrics.syncs().items() if v - syncs.get(k, 0)}
    assert steady_syncs == {"optimizer_step": steps - 2}
    # histc over integer expert ids, one per MoE layer and step, in float64
    assert after["widened.aten::histc"] == COMMON["num_hidden_layers"] * steps


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_histc_counts_like_cuda(dtype):
    """CUDA's histc takes integers, CPU's does not: disc counts them as
    CPU counts the same values in float64, bins and range given or taken
    from the data."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 100, (500,), generator=g, dtype=torch.int64).to(dtype)
    for bins, lo, hi in [(7, 0, 0), (10, 10, 60), (4, 3, 3)]:
        got = torch.histc(x.to("disc"), bins=bins, min=lo, max=hi).cpu()
        want = torch.histc(x.double(), bins=bins, min=lo, max=hi).to(dtype)
        assert got.dtype == dtype
        assert torch.equal(got, want), (bins, lo, hi)


def grouped_cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)
    offs = torch.tensor([3, 3, 7, 10], dtype=torch.int32)  # an empty group, rows past the last
    yield "2d_3d", (r(12, 8), r(4, 8, 16)), offs, lambda t: t[:10]
    yield "2d_3d_transposed", (r(12, 8), r(4, 16, 8).transpose(-2, -1)), offs, lambda t: t[:10]
    yield "3d_3d", (r(4, 5, 8), r(4, 8, 12)), None, lambda t: t


@pytest.mark.parametrize("case", list(grouped_cases()), ids=lambda c: c[0])
def test_grouped_mm_matches_cpu_forward_and_backward(case):
    """One recorded node, offsets as data: the same graph for other
    offsets, no sync before the result is read."""
    _, (a, b), offs, valid = case
    out_w = torch.randn(*torch._grouped_mm(a, b, offs=offs).shape)

    def run(device, offsets):
        a_, b_ = a.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()
        o = offsets.to(device) if offsets is not None else None
        y = torch._grouped_mm(a_, b_, offs=o)
        # rows past offs[-1] are left unwritten, as on CUDA: not compared
        (valid(y) * valid(out_w.to(device))).sum().backward()
        return [valid(y).detach().cpu(), valid(a_.grad).cpu(), b_.grad.cpu()]

    torch_disc.sync()
    metrics.reset()
    got = run("disc", offs)
    # no sync before the results are read (their read syncs, or runs alone)
    assert set(metrics.syncs()) <= {"to_cpu"} and sum(metrics.syncs().values()) <= 1
    for x, want in zip(got, run("cpu", offs)):
        torch.testing.assert_close(x, want, rtol=1e-5, atol=1e-5)
    if offs is not None:
        compiles = metrics.counters()["compiles"]
        other = torch.tensor([1, 5, 9, 10], dtype=torch.int32)
        for x, want in zip(run("disc", other), run("cpu", other)):
            torch.testing.assert_close(x, want, rtol=1e-5, atol=1e-5)
        assert metrics.counters()["compiles"] == compiles
    assert metrics.fallbacks() == {}
