"""Hand-written attention (lowering/passes/attention_pattern.cpp): q @ k^T,
scaled, masked, softmax, dropout, @ v runs as one fused attention call, and
in training autograd's backward of it as one fused backward, where nothing
else reads the scores or the probabilities: a Hugging Face model in eager
attention mode. Results match CPU eager (with dropout: disc's composite,
which draws the same mask); output_attentions keeps the ops as written."""
import pytest
import torch

import torch_disc

transformers = pytest.importorskip("transformers")

LAYERS = 2


def bert(**overrides):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=100,
                                  attn_implementation="eager", **overrides)
    return transformers.BertModel(cfg)


def batch(rows, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (rows, length), generator=g)
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[1, length // 2:] = 0  # a padded row
    return ids, mask


def delta(before):
    after = torch_disc.metrics.counters()
    return lambda k: after.get(k, 0) - before.get(k, 0)


def test_eager_bert_inference_runs_one_fused_call_per_layer():
    model = bert().eval()
    disc_model = bert().eval().to("disc")
    for rows, length in ((3, 9), (5, 13)):  # a new size compiles nothing
        ids, mask = batch(rows, length)
        with torch.no_grad():
            expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
            before = torch_disc.metrics.counters()
            got = disc_model(input_ids=ids.to("disc"), attention_mask=mask.to("disc")).last_hidden_state.cpu()
        d = delta(before)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert d("library.attention") == LAYERS
        assert d("fallbacks") == 0
        if length == 13:
            assert d("compiles") == 0


def test_scores_read_elsewhere_keep_the_ops():
    model = bert().eval()
    disc_model = bert().eval().to("disc")
    ids, mask = batch(3, 9)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        before = torch_disc.metrics.counters()
        got = disc_model(input_ids=ids.to("disc"), attention_mask=mask.to("disc"), output_attentions=True)
        got_probs = [a.cpu() for a in got.attentions]
    assert delta(before)("library.attention") == 0
    for a, b in zip(got_probs, expected.attentions):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture
def attention_option():
    yield torch_disc.options.set
    torch_disc.options.set("DISC_ATTENTION", "fused")


def readout(out):
    """A loss whose gradient reaches every output: a fixed random weighting
    (a normalised output's square sums to a constant)."""
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    return (out.float() * w.to(out.device)).sum()


def loss_of(model, device, seed=1, **inputs):
    torch.manual_seed(seed)  # the dropout masks
    return readout(model(**{k: v.to(device) for k, v in inputs.items()}).last_hidden_state)


def grads_of(model):
    return {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None}


def assert_grads_close(got, expected, rtol):
    """Every gradient within rtol of `expected`'s (norm of the difference
    over norm), or of a hundredth of the largest gradient's norm where it is
    smaller (some, like the key bias's, are rounding noise around an exact
    0)."""
    floor = 1e-2 * max(g.double().norm().item() for g in expected.values())
    for n, g in expected.items():
        g = g.double()
        err = (got[n].double() - g).norm().item() / max(g.norm().item(), floor)
        assert err < rtol, f"{n}: relative error {err:.3g}"


def test_training_runs_one_fused_backward_per_layer():
    model = bert(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train()
    disc_model = bert(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train().to("disc")
    for rows, length in ((3, 9), (5, 13)):  # a new size compiles nothing
        ids, mask = batch(rows, length)
        model.zero_grad()
        disc_model.zero_grad()
        loss_of(model, "cpu", input_ids=ids, attention_mask=mask).backward()
        before = torch_disc.metrics.counters()
        loss_of(disc_model, "disc", input_ids=ids, attention_mask=mask).backward()
        grads = grads_of(disc_model)
        d = delta(before)
        assert d("library.attention") == LAYERS
        assert d("library.attention_backward") == LAYERS
        assert d("fallbacks") == 0
        if length == 13:
            assert d("compiles") == 0
        assert_grads_close(grads, grads_of(model), 1e-4)


def train_both_ways(make, loss_fn, attention_option):
    """Loss and gradients of one step on disc with the fused calls and with
    the ops as written (DISC_ATTENTION=cpu), each from the same seed: the
    same dropout masks."""
    results = {}
    for mode in ("cpu", "fused"):
        attention_option("DISC_ATTENTION", mode)
        torch.manual_seed(0)
        model = make().train().to("disc")
        before = torch_disc.metrics.counters()
        loss = loss_fn(model)
        loss.backward()
        results[mode] = (loss.item(), grads_of(model), delta(before))
    return results


def assert_fused_trains_as_written(results, calls, rtol=1e-4):
    """One fused call each way per layer, and the loss and the gradients
    within rtol of the ops' as written (float32; the rounding of half types
    where the model computes in them)."""
    (loss_cpu, grads_cpu, d_cpu), (loss, grads, d) = results["cpu"], results["fused"]
    assert d("library.attention") == d("library.attention_backward") == calls
    assert d_cpu("library.attention_backward") == 0
    assert d("fallbacks") == 0
    assert loss == pytest.approx(loss_cpu, rel=rtol)
    assert_grads_close(grads, grads_cpu, rtol)


def test_dropout_draws_the_mask_the_ops_as_written_draw(attention_option):
    ids, mask = batch(3, 9)
    results = train_both_ways(lambda: bert(attention_probs_dropout_prob=0.3),
                              lambda m: loss_of(m, "disc", input_ids=ids, attention_mask=mask), attention_option)
    assert_fused_trains_as_written(results, LAYERS)


def test_probabilities_read_elsewhere_in_training_keep_the_ops():
    model = bert(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train()
    disc_model = bert(attention_probs_dropout_prob=0.0, hidden_dropout_prob=0.0).train().to("disc")
    ids, mask = batch(3, 9)
    out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    (out.last_hidden_state.square().mean() + out.attentions[0].square().mean()).backward()
    before = torch_disc.metrics.counters()
    got = disc_model(input_ids=ids.to("disc"), attention_mask=mask.to("disc"), output_attentions=True)
    (got.last_hidden_state.square().mean() + got.attentions[0].square().mean()).backward()
    grads = grads_of(disc_model)
    assert delta(before)("library.attention") == 0
    assert_grads_close(grads, grads_of(model), 1e-4)


def attention_by_hand(q, k, v, mask, scale):
    scores = torch.matmul(q, k.transpose(-1, -2)) / scale + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def test_a_row_masked_everywhere_is_nan_as_softmax_makes_it():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, 8) for _ in range(3))
    mask = torch.zeros(2, 1, 4, 4)
    mask[1, 0, 2] = float("-inf")  # query row 2 of batch 1 sees no key
    expected = attention_by_hand(q, k, v, mask, 8 ** 0.5)
    before = torch_disc.metrics.counters()
    with torch.no_grad():
        got = attention_by_hand(*(t.to("disc") for t in (q, k, v, mask)), 8 ** 0.5).cpu()
    assert delta(before)("library.attention") == 1
    assert torch.isnan(got[1, :, 2]).all() and torch.isnan(expected[1, :, 2]).all()
    keep = ~torch.isnan(expected)
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-5, atol=1e-6)


def eager_models():
    """Eager-attention models from transformers' configs, with the calls the
    pass makes in a forward: one per layer, or none where the model adds its
    scores in place (T5's position bias), which stays as written."""
    kw = dict(attn_implementation="eager")
    small = dict(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=128)
    return {
        "gpt2": (lambda: transformers.GPT2Model(transformers.GPT2Config(
            n_embd=64, n_layer=LAYERS, n_head=4, vocab_size=100, **kw)), LAYERS),
        "llama-gqa": (lambda: transformers.LlamaModel(transformers.LlamaConfig(
            num_key_value_heads=2, vocab_size=100, **small, **kw)), LAYERS),
        "distilbert": (lambda: transformers.DistilBertModel(transformers.DistilBertConfig(
            dim=64, n_layers=LAYERS, n_heads=4, hidden_dim=128, vocab_size=100, **kw)), LAYERS),
        "vit": (lambda: transformers.ViTModel(transformers.ViTConfig(
            image_size=32, patch_size=8, **small, **kw)), LAYERS),
        "t5-encoder": (lambda: transformers.T5EncoderModel(transformers.T5Config(
            d_model=64, d_kv=16, d_ff=128, num_layers=LAYERS, num_heads=4, vocab_size=100, **kw)), 0),
    }


@pytest.mark.parametrize("name", list(eager_models()))
def test_eager_models_match_cpu(name):
    make, calls = eager_models()[name]
    torch.manual_seed(0)
    model = make().eval()
    ids, mask = batch(2, 12)
    inputs = (dict(pixel_values=torch.randn(2, 3, 32, 32)) if name == "vit"
              else dict(input_ids=ids, attention_mask=mask))
    with torch.no_grad():
        expected = model(**inputs).last_hidden_state
        model.to("disc")
        before = torch_disc.metrics.counters()
        got = model(**{k: v.to("disc") for k, v in inputs.items()}).last_hidden_state.cpu()
    d = delta(before)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert d("library.attention") == calls
    assert d("fallbacks") == 0


@pytest.mark.parametrize("name", list(eager_models()))
def test_eager_models_train_as_written(name, attention_option):
    """Training with each model's own dropout (GPT-2's causal mask,
    DistilBERT's dropout, Llama's grouped heads, ViT without a mask): the
    fused forward and backward against the ops as written, on disc."""
    make, calls = eager_models()[name]
    ids, mask = batch(2, 12)
    inputs = (dict(pixel_values=torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
              if name == "vit" else dict(input_ids=ids, attention_mask=mask))
    results = train_both_ways(make, lambda m: loss_of(m, "disc", **inputs), attention_option)
    assert_fused_trains_as_written(results, calls)


def test_timm_vit_written_by_hand_trains_as_one_call_per_block(attention_option):
    """timm's Attention with fused attention off scales q before q @ k^T and
    writes no mask: the chain without a scale or a mask."""
    timm = pytest.importorskip("timm")
    from timm.layers import set_fused_attn
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))

    def loss_fn(model):
        torch.manual_seed(1)  # the dropout masks
        return readout(model(images.to("disc")))
    set_fused_attn(False)
    try:
        results = train_both_ways(
            lambda: timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=LAYERS,
                                      num_classes=10, attn_drop_rate=0.1),
            loss_fn, attention_option)
    finally:
        set_fused_attn(True)
    assert_fused_trains_as_written(results, LAYERS)


def relative_error(got, exact):
    return ((got.double() - exact).norm() / exact.norm()).item()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_attention_is_nearer_the_exact_result_than_the_ops_as_written(dtype, attention_option):
    """In bf16 or f16 the fused call computes in float32 and rounds its
    outputs once, where the ops as written round every step: forward and
    gradients nearer the exact ones (float64, from the same inputs). As a
    half model writes it (a half mask) and as autocast runs it (a float32
    mask, a float32 softmax, the probabilities cast back)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g).to(dtype) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 16)
    mask[1, ..., 10:] = torch.finfo(torch.float32).min
    grad = torch.randn(2, 3, 16, 8, generator=g).to(dtype)

    def run(device, leaf_dtype, mask_dtype):
        leaves = [t.to(device, leaf_dtype).requires_grad_() for t in (q, k, v)]
        before = torch_disc.metrics.counters()
        with torch.autocast("disc", dtype=dtype, enabled=device == "disc" and mask_dtype == torch.float32):
            out = attention_by_hand(*leaves, mask.to(device, mask_dtype), 8 ** 0.5)
        out.backward(grad.to(device, out.dtype))
        if device == "disc":
            torch_disc.sync()  # one graph, forward and backward
        return [t.detach().cpu() for t in [out] + [t.grad for t in leaves]], delta(before)

    exact, _ = run("cpu", torch.float64, torch.float64)
    for mask_dtype in (dtype, torch.float32):
        attention_option("DISC_ATTENTION", "cpu")
        written, d_written = run("disc", dtype, mask_dtype)
        attention_option("DISC_ATTENTION", "fused")
        fused, d = run("disc", dtype, mask_dtype)
        assert d("library.attention") == d("library.attention_backward") == 1
        assert d_written("library.attention") == 0
        for name, f, w, e in zip(("out", "dq", "dk", "dv"), fused, written, exact):
            assert f.dtype == dtype, name
            assert relative_error(f, e) <= relative_error(w, e), name
            assert relative_error(f, e) < 2 * torch.finfo(dtype).eps, name


def autocast_loss(model, ids, mask):
    torch.manual_seed(1)  # the dropout masks
    with torch.autocast("disc", dtype=torch.bfloat16):
        out = model(input_ids=ids.to("disc"), attention_mask=mask.to("disc")).last_hidden_state
    return readout(out)


def test_autocast_training_runs_one_fused_call_each_way(attention_option):
    """Under bf16 autocast the products are bf16 and the softmax float32,
    with casts between: still one call each way, dropout drawn as written."""
    ids, mask = batch(3, 9)
    results = train_both_ways(lambda: bert(attention_probs_dropout_prob=0.1),
                              lambda m: autocast_loss(m, ids, mask), attention_option)
    assert_fused_trains_as_written(results, LAYERS, rtol=2e-2)


@pytest.mark.parametrize("name", ["gpt2", "llama-gqa"])
def test_models_in_bf16_train_as_written(name, attention_option):
    """A model in bf16 throughout (GPT-2's causal mask and dropout, Llama's
    float32 softmax cast back to bf16)."""
    make, calls = eager_models()[name]
    ids, mask = batch(2, 12)
    results = train_both_ways(lambda: make().to(torch.bfloat16),
                              lambda m: loss_of(m, "disc", input_ids=ids, attention_mask=mask),
                              attention_option)
    assert_fused_trains_as_written(results, calls, rtol=2e-2)
