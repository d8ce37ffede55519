"""scaled_dot_product_attention on disc (attention_choice.cpp): in float32
disc's fused attention (trace/attention_ops.cpp), which matches eager
without dropout and, with dropout, draws the math composite's mask for the
same seed and so matches the composite forward and backward, grouped heads
(enable_gqa) included; bf16 and f16 take it with dropout and match the composite (which computes in float32);
elsewhere (bf16 without dropout, DISC_ATTENTION=cpu, sdpa_kernel) the
kernel the CPU would take."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_disc

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu("
FUSED = "disc::attention("
FUSED_BACKWARD = "disc::attention_backward("
FLASH_BACKWARD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward("


def qkv(b=2, h=3, lq=16, lk=16, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g) for n in (lq, lk, lk)]


def masks(lq, lk):
    g = torch.Generator().manual_seed(1)
    return {
        "none": None,
        "bool": torch.rand(lq, lk, generator=g) > 0.2,
        "additive": torch.randn(2, 1, lq, lk, generator=g),
    }


def sdpa_on(device, tensors, mask, causal, grad):
    leaves = [t.clone().to(device).requires_grad_(grad) for t in tensors]
    m = None if mask is None else mask.to(device)
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal)
    return out, leaves


@pytest.fixture
def attention_option():
    yield torch_disc.options.set
    torch_disc.options.set("DISC_ATTENTION", "fused")


@pytest.mark.parametrize("mode,forward,backward", [("fused", FUSED, FUSED_BACKWARD),
                                                   ("cpu", FLASH, FLASH_BACKWARD)])
@pytest.mark.parametrize("mask", ["none", "bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_no_dropout_matches_eager(mask, causal, mode, forward, backward, attention_option):
    if causal and mask != "none":
        pytest.skip("SDPA takes a mask or is_causal, not both")
    attention_option("DISC_ATTENTION", mode)
    tensors = qkv()
    m = masks(16, 16)[mask]
    want, cpu_leaves = sdpa_on("cpu", tensors, m, causal, grad=True)
    rng = torch.get_device_module("disc").get_rng_state()
    got, disc_leaves = sdpa_on("disc", tensors, m, causal, grad=True)
    assert forward in torch_disc.graph_text(got)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
    want.backward(cot)
    got.backward(cot.to("disc"))
    assert backward in torch_disc.graph_text(*[t.grad for t in disc_leaves])
    for d, c in zip(disc_leaves, cpu_leaves):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-6)
    if mode == "fused":  # no dropout, no draw (the capture draws for any op tagged random)
        assert torch.equal(torch.get_device_module("disc").get_rng_state(), rng)


def test_sdpa_kernel_picks_the_cpus_kernels():
    tensors = qkv()
    got, _ = sdpa_on("disc", tensors, None, False, grad=False)
    assert FUSED in torch_disc.graph_text(got)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        flash, _ = sdpa_on("disc", tensors, None, False, grad=False)
    assert FLASH in torch_disc.graph_text(flash)
    with sdpa_kernel(SDPBackend.MATH):
        forced, _ = sdpa_on("disc", tensors, None, False, grad=False)
        dropped = F.scaled_dot_product_attention(*[t.to("disc") for t in tensors], dropout_p=0.5)
    text = torch_disc.graph_text(dropped)
    assert FUSED not in text and "aten::native_dropout" in text
    text = torch_disc.graph_text(forced)
    assert FLASH not in text and "aten::bmm" in text
    torch.testing.assert_close(forced.cpu(), got.cpu(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(flash.cpu(), got.cpu(), rtol=1e-5, atol=1e-6)


def dropout_step(mode, tensors, mask, causal, p=0.3, seed=5):
    """Forward and backward of SDPA with dropout on disc under `mode`, from
    the same generator state: the values, the gradients and both graphs."""
    torch_disc.options.set("DISC_ATTENTION", mode)
    torch.manual_seed(seed)
    leaves = [t.to("disc").requires_grad_() for t in tensors]
    m = None if mask is None else mask.to("disc")
    out = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal, dropout_p=p)
    forward = torch_disc.graph_text(out)
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(cot.to("disc"))
    backward = torch_disc.graph_text(*[t.grad for t in leaves])
    return out.cpu(), [t.grad.cpu() for t in leaves], forward, backward


@pytest.mark.parametrize("mask", ["none", "bool", "additive", "causal"])
def test_dropout_runs_the_fused_kernel_and_matches_the_composite(mask, attention_option):
    tensors = qkv(lq=40, lk=72)
    m = None if mask == "causal" else masks(40, 72)[mask]
    before = torch_disc.metrics.counters().get("fallbacks", 0)
    out, grads, forward, backward = dropout_step("fused", tensors, m, mask == "causal")
    assert FUSED in forward and "native_dropout" not in forward and "aten::bmm" not in forward
    assert FUSED_BACKWARD in backward and "aten::bmm" not in backward
    want, want_grads, composite, _ = dropout_step("cpu", tensors, m, mask == "causal")
    assert "aten::native_dropout" in composite and FUSED not in composite
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert torch_disc.metrics.counters().get("fallbacks", 0) == before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mask", ["bool", "additive", "causal"])
def test_half_precision_dropout_runs_the_fused_kernel_and_matches_the_composite(
        dtype, mask, attention_option):
    """The composite widens bf16/f16 to float32 and rounds the result once;
    the fused kernel too, so they differ by the rounding of the output
    (and, in the backward, of the saved output): one unit in the last place
    of the result's magnitude. A different dropout mask would differ by
    the values themselves."""
    tensors = [t.to(dtype) for t in qkv(lq=40, lk=72)]
    m = None if mask == "causal" else masks(40, 72)[mask]
    m = m.to(dtype) if m is not None and m.is_floating_point() else m
    out, grads, forward, backward = dropout_step("fused", tensors, m, mask == "causal")
    assert FUSED in forward and "native_dropout" not in forward
    assert FUSED_BACKWARD in backward
    want, want_grads, composite, _ = dropout_step("cpu", tensors, m, mask == "causal")
    assert "aten::native_dropout" in composite and FUSED not in composite
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    ulp = torch.finfo(dtype).eps
    torch.testing.assert_close(out, want, rtol=ulp, atol=ulp)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=2 * ulp, atol=2 * ulp * w.abs().max().item())


@pytest.mark.parametrize("mask", ["bool", "additive", "causal"])
def test_grouped_heads_match_eager_and_with_dropout_the_composite(mask, attention_option):
    """enable_gqa: 6 query heads over 2 key / value heads. Without dropout
    the fused kernel gives eager's values and gradients (the key heads'
    summed over their groups); with dropout, the composite's under one
    seed."""
    g = torch.Generator().manual_seed(4)
    tensors = [torch.randn(2, h, 40, 8, generator=g) for h in (6, 2, 2)]
    m = None if mask == "causal" else masks(40, 40)[mask]
    causal = mask == "causal"
    leaves = [t.clone().requires_grad_() for t in tensors]
    want = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal, enable_gqa=True)
    cot = torch.randn(want.shape, generator=g)
    want.backward(cot)
    disc_leaves = [t.to("disc").requires_grad_() for t in tensors]
    got = F.scaled_dot_product_attention(*disc_leaves, attn_mask=None if m is None else m.to("disc"),
                                         is_causal=causal, enable_gqa=True)
    assert FUSED in torch_disc.graph_text(got)
    got.backward(cot.to("disc"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    for d, c in zip(disc_leaves, leaves):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5)

    def dropped(mode):
        torch_disc.options.set("DISC_ATTENTION", mode)
        torch.manual_seed(5)
        ls = [t.to("disc").requires_grad_() for t in tensors]
        out = F.scaled_dot_product_attention(*ls, attn_mask=None if m is None else m.to("disc"),
                                             is_causal=causal, dropout_p=0.3, enable_gqa=True)
        text = torch_disc.graph_text(out)
        out.backward(cot.to("disc"))
        return out.cpu(), [t.grad.cpu() for t in ls], text
    out, grads, text = dropped("fused")
    want, want_grads, composite = dropped("cpu")
    assert FUSED in text and FUSED not in composite
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for g_, w in zip(grads, want_grads):
        torch.testing.assert_close(g_, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_attention_between_projections_copies_nothing(dtype, counters):
    """q, k and v as a projection's [B, L, H * D] output viewed as heads, and
    the heads concatenated after, as transformers write it. The fused
    kernels read the strided heads as they are, and lay out the output and
    the gradients as ATen's flash kernels do ([B, L, H, D] memory viewed as
    [B, H, L, D]; eager's strides), so the views around them stay views.
    One graph: the two attention ops and the cotangent's zeros and fill are
    its only ATen launches that are not views, and no input is copied."""
    b, l, h, d = 2, 16, 4, 8
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(b, l, h * d, generator=g, dtype=dtype) for _ in range(3)]
    cot = torch.randn(b, l, h * d, generator=g, dtype=dtype)

    def step(device):
        leaves = [x.clone().to(device).requires_grad_() for x in xs]
        q, k, v = (t.view(b, l, h, d).transpose(1, 2) for t in leaves)
        strides = []
        q.register_hook(lambda grad: strides.append(grad.stride()))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if dtype != torch.float32 else 0.0)
        strides.append(out.stride())
        y = out.transpose(1, 2).reshape(b, l, h * d)
        (y * cot.to(device)).sum().backward()
        return y, [t.grad for t in leaves], strides

    before = counters()
    torch.manual_seed(0)
    y, grads, strides = step("disc")
    torch_disc.sync(wait=True)  # one graph for the output and the gradients
    c = {k: v - before.get(k, 0) for k, v in counters().items()}
    y, grads = y.cpu(), [t.cpu() for t in grads]
    assert (c["graphs_run"], c["launches.aten"]) == (1, 4)
    assert not [k for k in c if k.startswith("replay.contiguous_copies")]
    if dtype == torch.float32:  # eager's flash kernels (no dropout): values and layouts
        want_y, want_grads, want_strides = step("cpu")
        assert strides == want_strides
        torch.testing.assert_close(y, want_y)
        for got, want in zip(grads, want_grads):
            torch.testing.assert_close(got, want)
    else:
        assert strides == [(l * h * d, d, h * d, 1)] * 2


def test_each_call_draws_a_new_mask_without_recompiling(attention_option):
    tensors = qkv(lq=32, lk=32)
    first, *_ = dropout_step("fused", tensors, None, False, seed=1)
    compiles = torch_disc.metrics.counters()["compiles"]
    second, *_ = dropout_step("fused", tensors, None, False, seed=2)
    again, *_ = dropout_step("fused", tensors, None, False, seed=1)
    assert torch_disc.metrics.counters()["compiles"] == compiles
    assert not torch.equal(first, second)
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_what_the_fused_kernel_does_not_take_keeps_the_composite(attention_option):
    tensors = qkv()
    leaves = [t.to("disc") for t in tensors]
    mask = torch.randn(16, 16).to("disc").requires_grad_()  # its gradient: the composite's
    text = torch_disc.graph_text(F.scaled_dot_product_attention(*leaves, attn_mask=mask, dropout_p=0.2))
    assert FUSED not in text and "aten::native_dropout" in text
    half = [t.to(torch.bfloat16) for t in leaves]
    text = torch_disc.graph_text(F.scaled_dot_product_attention(*half))
    assert FUSED not in text and FLASH in text
    mixed = [half[0], leaves[1], leaves[2]]  # the CPU's error for mixed dtypes
    with pytest.raises(RuntimeError, match="same dtype"):
        F.scaled_dot_product_attention(*mixed, dropout_p=0.2)


def test_bf16_autocast_attention_matches_eagers_autocast():
    tensors = qkv(lq=32, lk=32, d=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.scaled_dot_product_attention(*tensors, is_causal=True)
    with torch.autocast("disc", dtype=torch.bfloat16):
        got = F.scaled_dot_product_attention(*[t.to("disc") for t in tensors], is_causal=True)
    assert got.dtype == want.dtype == torch.bfloat16
    assert FLASH in torch_disc.graph_text(got)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_a_hugging_face_eval_forward_runs_the_fused_kernel_and_matches_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64,
                                     vocab_size=100)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(input_ids=ids).logits
        model.to("disc")
        torch_disc.sync()
        got = model(input_ids=ids.to("disc")).logits
        assert torch_disc.graph_text(got).count(FUSED) == config.n_layer
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_a_grouped_query_hugging_face_model_runs_the_fused_kernel():
    """Llama with 2 key / value heads for 4 query heads and no padding:
    transformers calls SDPA with enable_gqa and is_causal; one fused call
    per layer, eager's logits and gradients."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 100, (2, 24), generator=torch.Generator().manual_seed(3))
    want = model(input_ids=ids, labels=ids)
    want.loss.backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to("disc")
    got = model(input_ids=ids.to("disc"), labels=ids.to("disc"))
    got.loss.backward()
    grads = [p.grad for p in model.parameters()]
    text = torch_disc.graph_text(*grads)
    assert text.count(FUSED) == text.count(FUSED_BACKWARD) == config.num_hidden_layers
    torch.testing.assert_close(got.logits.cpu(), want.logits, rtol=1e-4, atol=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)


def step_both_ways(cpu_model, loss_of):
    """Under DISC_ATTENTION fused and cpu: a copy of ``cpu_model`` on disc,
    ``loss_of(model)`` under one seed, and its backward. By mode: the loss,
    the gradients (on the CPU) and the text of the gradients' graph."""
    results = {}
    for mode in ("fused", "cpu"):
        torch_disc.options.set("DISC_ATTENTION", mode)
        model = copy.deepcopy(cpu_model).to("disc")
        torch.manual_seed(7)
        loss = loss_of(model)
        loss.backward()
        grads = [p.grad for p in model.parameters()]
        text = torch_disc.graph_text(*grads)
        results[mode] = (loss.item(), [g.cpu() for g in grads], text)
    return results


def test_a_hugging_face_training_step_runs_the_fused_kernel(attention_option):
    """GPT-2 with attention dropout: one fused call per layer each way, and
    the loss and gradients of the composite under the same seed."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=64, vocab_size=100,
                                     attn_pdrop=0.2, resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(0)
    cpu_model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(3))
    results = step_both_ways(
        cpu_model, lambda model: model(input_ids=ids.to("disc"), labels=ids.to("disc")).loss)
    loss, grads, text = results["fused"]
    assert text.count(FUSED) == text.count(FUSED_BACKWARD) == config.n_layer
    want_loss, want_grads, _ = results["cpu"]
    assert loss == pytest.approx(want_loss, rel=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_a_bf16_autocast_training_step_runs_the_fused_kernel(attention_option):
    """BERT under bf16 autocast with attention dropout and a padding mask:
    q, k and v are bf16, the mask float32; one fused call per layer each
    way, and the composite's loss and gradients (the key bias's gradient is
    zero up to rounding, hence the absolute floor)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=100,
                                     attention_probs_dropout_prob=0.2, hidden_dropout_prob=0.0)
    torch.manual_seed(0)
    cpu_model = transformers.BertForSequenceClassification(config).train()
    ids = torch.randint(0, 100, (2, 40), generator=torch.Generator().manual_seed(3))
    padding = torch.ones(2, 40, dtype=torch.long)
    padding[1, 30:] = 0
    def autocast_loss(model):
        with torch.autocast("disc", dtype=torch.bfloat16):
            return model(input_ids=ids.to("disc"), attention_mask=padding.to("disc"),
                         labels=torch.tensor([0, 1]).to("disc")).loss

    results = step_both_ways(cpu_model, autocast_loss)
    loss, grads, text = results["fused"]
    assert text.count(FUSED) == text.count(FUSED_BACKWARD) == config.num_hidden_layers
    want_loss, want_grads, composite = results["cpu"]
    assert FUSED not in composite and "aten::native_dropout" in composite
    assert loss == pytest.approx(want_loss, rel=1e-3)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-6)


def test_the_attention_benchmark_runs_every_mode():
    from benchmarks import attention
    result = attention.main(["--quick", "--dtype", "bfloat16"])
    (row,) = result["rows"]
    assert row["dtype"] == "bfloat16"
    for mode in attention.MODES:
        assert row[mode]["ms"] > 0 and row[mode]["rss_mb"] >= 0
