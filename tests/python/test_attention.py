"""scaled_dot_product_attention on disc takes the kernel the CPU would take
(attention_choice.cpp): the flash kernel where eager's policy picks it (no
dropout), which never writes the [B, H, L, L] scores, else the math
composite; both match eager forward and backward."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torch_disc

FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu("
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


@pytest.mark.parametrize("mask", ["none", "bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_no_dropout_records_the_flash_kernel_and_matches_eager(mask, causal):
    if causal and mask != "none":
        pytest.skip("SDPA takes a mask or is_causal, not both")
    tensors = qkv()
    m = masks(16, 16)[mask]
    want, cpu_leaves = sdpa_on("cpu", tensors, m, causal, grad=True)
    got, disc_leaves = sdpa_on("disc", tensors, m, causal, grad=True)
    assert FLASH in torch_disc.graph_text(got)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
    want.backward(cot)
    got.backward(cot.to("disc"))
    assert FLASH_BACKWARD in torch_disc.graph_text(*[t.grad for t in disc_leaves])
    for d, c in zip(disc_leaves, cpu_leaves):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-5, atol=1e-6)


def test_dropout_and_the_math_switch_keep_the_composite():
    tensors = qkv()
    got, _ = sdpa_on("disc", tensors, None, False, grad=False)
    with sdpa_kernel(SDPBackend.MATH):
        forced, _ = sdpa_on("disc", tensors, None, False, grad=False)
    text = torch_disc.graph_text(forced)
    assert FLASH not in text and "aten::bmm" in text
    torch.testing.assert_close(forced.cpu(), got.cpu(), rtol=1e-5, atol=1e-6)
    leaves = [t.to("disc") for t in tensors]
    dropped = F.scaled_dot_product_attention(*leaves, dropout_p=0.5)
    text = torch_disc.graph_text(dropped)
    assert FLASH not in text and "aten::native_dropout" in text
    # Dropout zeroes whole score entries: every output is a mix of v's rows
    # with weights summing to 0 or 2 (1 / (1 - p)); here only its finiteness.
    assert torch.isfinite(dropped.cpu()).all()


def test_bf16_autocast_attention_matches_eagers_autocast():
    tensors = qkv(lq=32, lk=32, d=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.scaled_dot_product_attention(*tensors, is_causal=True)
    with torch.autocast("disc", dtype=torch.bfloat16):
        got = F.scaled_dot_product_attention(*[t.to("disc") for t in tensors], is_causal=True)
    assert got.dtype == want.dtype == torch.bfloat16
    assert FLASH in torch_disc.graph_text(got)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_a_hugging_face_eval_forward_runs_flash_and_matches_eager():
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
        assert torch_disc.graph_text(got).count(FLASH) == config.n_layer
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
