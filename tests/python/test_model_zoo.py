"""Models nobody here wrote, trained for a few steps on disc (and through
torch.compile(backend="disc")) and compared with a float64 CPU run of the
same model: torchvision's ResNet-18 (with SiLU
for ReLU there, see smooth_resnet18), a small
Hugging Face GPT-2 built from a config (tied embedding and head), an LSTM
classifier, a ConvNeXt-style block (depthwise convolution, layer norm over a
channels-last permute) and a transformer encoder with a padding mask.

For each, disc's error against float64 (the losses of every step, the
gradients of the first, the parameters and buffers after the last) must be
no larger than eager float32's error times a small factor; nothing falls
back, and the steps after the first compile nothing new. Random weights,
no downloads; dropout is off so that the runs see the same numbers.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_disc

FACTOR = 8  # disc's error may be this many times eager float32's ...
FLOOR = 1e-5  # ... or this (relative to the values' scale), whichever is larger
STEPS = 3


def train(build, batch, loss_fn, device, dtype, compiled=False, autocast=None):
    """Losses of STEPS SGD steps, the first step's gradients and the final
    state, as float64 CPU tensors. ``compiled``: the model stays on the CPU
    and its steps run through torch.compile(backend="disc"). ``autocast``:
    the forward under autocast in that dtype, float16 with a GradScaler."""
    torch.manual_seed(0)
    model = build().to(device=device, dtype=dtype)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = [x.to(device=device, dtype=dtype if x.is_floating_point() else x.dtype) for x in batch]
    step_model = torch.compile(model, backend="disc") if compiled else model
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(device_type, enabled=autocast == torch.float16)
    losses, grads = [], None
    for _ in range(STEPS):
        opt.zero_grad()
        with torch.autocast(device_type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss = loss_fn(step_model, *inputs)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if grads is None:
            grads = [p.grad.detach().cpu().double() for p in model.parameters()]
        scaler.step(opt)
        scaler.update()
        losses.append(loss.detach().cpu().double().reshape(1))
    state = [t.detach().cpu().double() for t in model.state_dict().values() if t.is_floating_point()]
    return [torch.cat(losses)] + grads + state


def assert_close_to_float64(build, batch, loss_fn, counters, compiled=False, autocast=None,
                            floor=FLOOR):
    exact = train(build, batch, loss_fn, "cpu", torch.float64)
    eager = train(build, batch, loss_fn, "cpu", torch.float32, autocast=autocast)
    torch_disc.metrics.reset()
    if compiled:
        torch._dynamo.reset()
        disc = train(build, batch, loss_fn, "cpu", torch.float32, compiled=True)
    else:
        disc = train(build, batch, loss_fn, "disc", torch.float32, autocast=autocast)
    assert counters().get("fallbacks", 0) == 0
    worst = []
    for k, (x, e, d) in enumerate(zip(exact, eager, disc)):
        scale = x.abs().max().item() + 1e-12
        eager_err = (e - x).abs().max().item() / scale
        disc_err = (d - x).abs().max().item() / scale
        worst.append((disc_err, eager_err, k))
        assert disc_err <= max(FACTOR * eager_err, floor), (k, disc_err, eager_err)
    return worst


def steady_compiles(build, batch, loss_fn, counters):
    """Compiles of the steps after the first two (a new graph per step
    would recompile for ever)."""
    torch.manual_seed(0)
    model = build().to("disc")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    inputs = [x.to("disc") for x in batch]
    for step in range(4):
        if step == 2:
            torch_disc.sync()
            before = counters()["compiles"]
        opt.zero_grad()
        loss_fn(model, *inputs).backward()
        opt.step()
        torch_disc.sync()
    return counters()["compiles"] - before


def classify(model, x, y):
    return F.cross_entropy(model(x), y)


# ----------------------------------------------------------------------------
# The models.


def resnet18():
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18(num_classes=10)


def smooth_resnet18():
    """ResNet-18 with SiLU for ReLU. A ReLU gradient is discontinuous: a
    pre-activation within rounding of 0 (1e-5 here) takes its mask one way
    in one float32 run and the other way in another, and changes a weight
    gradient entry by up to a third -- between any two float32 runs (disc's
    NHWC convolutions sum in another order than ATen's), not a disc error.
    The float64 comparison needs a model whose gradients are continuous."""
    model = resnet18()
    for name, module in list(model.named_modules()):
        for child, sub in list(module.named_children()):
            if isinstance(sub, nn.ReLU):
                setattr(module, child, nn.SiLU())
    return model


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7x7 convolution, layer norm over channels
    (channels-last permute), inverted bottleneck MLP with GELU, layer scale,
    residual; then a pooled linear head."""

    def __init__(self, dim=16, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, 4, stride=4)
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 4 * dim)
        self.pw2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x)
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean((2, 3)))


class LSTMClassifier(nn.Module):
    def __init__(self, vocab=50, dim=16, hidden=24, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, ids):
        out, _ = self.rnn(self.emb(ids))
        return self.head(out[:, -1])


class Encoder(nn.Module):
    """nn.TransformerEncoder over embedded tokens, padded positions masked,
    mean-pooled over the real ones."""

    def __init__(self, vocab=50, dim=32, classes=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, nhead=4, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids, lengths):
        pad = torch.arange(ids.shape[1], device=ids.device)[None, :] >= lengths[:, None]
        h = self.encoder(self.emb(ids), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


def gpt2():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    return model


def lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def image_batch(n=4, size=32):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n, 3, size, size, generator=g), torch.randint(0, 10, (n,), generator=g)]


def token_batch(vocab=50, n=4, length=8, classes=3):
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, vocab, (n, length), generator=g), torch.randint(0, classes, (n,), generator=g)]


CASES = {
    "resnet18": (resnet18, image_batch(n=8, size=64), classify),
    "resnet18_silu": (smooth_resnet18, image_batch(n=8, size=64), classify),
    "convnext_block": (ConvNeXtBlock, image_batch(size=32), classify),
    "lstm_classifier": (LSTMClassifier, token_batch(), classify),
    "transformer_encoder": (Encoder, token_batch()[:1] + [torch.tensor([8, 5, 3, 6])]
                            + token_batch()[1:], lambda m, ids, lengths, y: F.cross_entropy(m(ids, lengths), y)),
    "gpt2": (gpt2, [torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(3))], lm_loss),
}


@pytest.mark.parametrize("name", [n for n in CASES if n != "resnet18"])  # ReLU: see smooth_resnet18
def test_model_trains_like_float64_cpu(name, counters):
    build, batch, loss_fn = CASES[name]
    assert_close_to_float64(build, batch, loss_fn, counters)


# A few units of the autocast dtype's last place, relative to the values'
# scale: below it, eager's own error can be luckily small.
AUTOCAST_FLOOR = {torch.bfloat16: 2 ** -6, torch.float16: 2 ** -9}


@pytest.mark.parametrize("dtype", list(AUTOCAST_FLOOR), ids=str)
@pytest.mark.parametrize("name", [n for n in CASES if n != "resnet18"])
def test_model_under_autocast_trains_like_eager_autocast(name, dtype, counters):
    """The same models with their forward under autocast (bf16, or f16
    with a GradScaler): disc's error against float64 no larger than eager
    autocast's times FACTOR. disc rounds bf16/f16 ops as ATen does, and
    widens f16 GEMMs and convolutions to f32."""
    build, batch, loss_fn = CASES[name]
    try:
        train(build, batch, loss_fn, "cpu", torch.float32, autocast=dtype)
    except RuntimeError as e:  # eager's f16 LSTM: oneDNN has no f16 RNN on most CPUs
        pytest.skip(f"CPU eager cannot train it: {str(e)[:120]}")
    assert_close_to_float64(build, batch, loss_fn, counters, autocast=dtype,
                            floor=AUTOCAST_FLOOR[dtype])


@pytest.mark.parametrize("name", list(CASES))
def test_model_steps_compile_nothing_new(name, counters):
    build, batch, loss_fn = CASES[name]
    assert steady_compiles(build, batch, loss_fn, counters) == 0


@pytest.mark.parametrize("name", [n for n in CASES if n != "resnet18"])
def test_model_trains_through_torch_compile_like_float64_cpu(name, counters):
    """The same models trained with torch.compile(backend="disc") on CPU
    tensors: AOTAutograd's forward and backward graphs run from templates,
    traced once each (and once more at most to check), never eagerly."""
    build, batch, loss_fn = CASES[name]
    # Dynamo leaves nn.LSTM to eager unless told otherwise.
    with torch._dynamo.config.patch(allow_rnn=True):
        assert_close_to_float64(build, batch, loss_fn, counters, compiled=True)
    c = counters()
    n = {k: v for k, v in c.items() if k.startswith("compiled.")}
    assert c.get("compiled.eager_calls", 0) == 0 and c.get("compiled.traced_calls", 0) == 0, n
    assert c["compiled.template_calls"] >= 2 * STEPS


# ----------------------------------------------------------------------------
# Inference through torch_disc.compile(freeze=True).


def torchvision_model(name):
    def build():
        torchvision = pytest.importorskip("torchvision")
        return getattr(torchvision.models, name)(num_classes=10)
    return build


def tiny_llama():
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2))


def tiny_distilbert():
    transformers = pytest.importorskip("transformers")
    return transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=100, dim=32, n_layers=2, n_heads=4, hidden_dim=64))


def images(*batches):
    return [(torch.randn(b, 3, 64, 64, generator=torch.Generator().manual_seed(b)),) for b in batches]


def tokens(*lengths):
    return [(torch.randint(0, 100, (2, n), generator=torch.Generator().manual_seed(n)),) for n in lengths]


# (DenseNet-121, checked by hand, takes 45 s here; its BatchNorm -> ReLU ->
# convolution order is test_compiled.py's pre_activation.)
INFERENCE_CASES = {
    "mobilenet_v3_small": (torchvision_model("mobilenet_v3_small"), images(2, 3, 5)),
    "efficientnet_b0": (torchvision_model("efficientnet_b0"), images(2, 3, 5)),
    "llama": (tiny_llama, tokens(7, 12, 20)),
    "distilbert": (tiny_distilbert, tokens(7, 12, 20)),
}


@pytest.mark.parametrize("name", list(INFERENCE_CASES))
def test_frozen_inference_like_float64_cpu(name, counters):
    """Frozen (BatchNorm folded, weights constant) at three batch sizes or
    lengths, all from one template: as close to float64 as eager float32."""
    build, calls = INFERENCE_CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    exact = build().eval()
    exact.load_state_dict(model.state_dict())
    exact.double()
    torch._dynamo.reset()
    compiled = torch_disc.compile(model, freeze=True, dynamic=True)
    logits = lambda out: getattr(out, "logits", out)  # noqa: E731
    with torch.no_grad():
        for inputs in calls:
            want = logits(exact(*[x.double() if x.is_floating_point() else x for x in inputs]))
            scale = want.abs().max().item()
            disc_err = (logits(compiled(*inputs)) - want).abs().max().item() / scale
            eager_err = (logits(model(*inputs)) - want).abs().max().item() / scale
            assert disc_err <= max(FACTOR * eager_err, FLOOR), (disc_err, eager_err)
    c = counters()
    n = {k: v for k, v in c.items() if k.startswith("compiled.")}
    assert n["compiled.templates"] == 1 and n["compiled.template_calls"] == 3, n
    assert c.get("fallbacks", 0) == 0
