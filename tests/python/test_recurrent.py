"""Recurrent layers on disc: nn.LSTM, nn.GRU, nn.RNN and the LSTM / GRU
cells, forward and backward, with packed sequences, against a float64 CPU
run of the same module. For a device other than CPU, ATen runs every time
step through _thnn_fused_lstm_cell / _thnn_fused_gru_cell (CUDA-only in
PyTorch; disc records them as element-wise ops, recurrent_cells.cpp): none
of it falls back. The layers are one op per layer and direction instead
(recurrent_layers.cpp): nn.LSTM oneDNN's mkldnn_rnn_layer, as eager CPU
runs it; nn.GRU and nn.RNN disc::rnn_layer. A sequence length seen before
hits the compile cache.
"""
import copy

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torch_disc


def run(module, inputs, device, dtype=torch.float32):
    """Output and input/parameter gradients of sum(out * weights) on
    `device` in `dtype`, all returned as float64 CPU tensors."""
    m = copy.deepcopy(module).to(device=device, dtype=dtype)
    xs = [x.detach().to(device=device, dtype=dtype).requires_grad_() for x in inputs]
    out = m(*xs)
    out = out[0] if isinstance(out, tuple) else out
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).reshape(out.shape)
    (out * weights.to(device=device, dtype=dtype)).sum().backward()
    grads = [x.grad for x in xs] + [p.grad for p in m.parameters()]
    return [t.detach().cpu().double() for t in [out] + grads if t is not None]  # c: LSTM only


def assert_matches_float64(module, inputs):
    torch.manual_seed(0)
    exact = run(module, inputs, "cpu", torch.float64)
    eager = run(module, inputs, "cpu")
    disc = run(module, inputs, "disc")
    for k, (e, f, d) in enumerate(zip(exact, eager, disc)):
        eager_err = (f - e).abs().max().item()
        disc_err = (d - e).abs().max().item()
        assert disc_err <= 4 * eager_err + 1e-6, (k, disc_err, eager_err)


SEQ, BATCH, FEATURES, HIDDEN = 5, 3, 6, 8


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("layers,bidirectional,batch_first",
                         [(1, False, False), (2, True, True)], ids=["1-layer", "2-layer-bi"])
def test_recurrent_layers_match_float64(cls, layers, bidirectional, batch_first, counters):
    torch.manual_seed(0)
    module = cls(FEATURES, HIDDEN, num_layers=layers, bidirectional=bidirectional,
                 batch_first=batch_first)
    x = torch.randn((BATCH, SEQ, FEATURES) if batch_first else (SEQ, BATCH, FEATURES))
    assert_matches_float64(module, [x])
    assert counters().get("fallbacks", 0) == 0


class CellSteps(nn.Module):
    """Three steps of a cell, the state carried over (h, or (h, c))."""

    def __init__(self, cls, bias):
        super().__init__()
        self.cell = cls(FEATURES, HIDDEN, bias=bias)

    def forward(self, x, h, c):
        state = (h, c) if isinstance(self.cell, nn.LSTMCell) else h
        outs = []
        for t in range(3):
            state = self.cell(x[t], state)
            outs.append(state[0] + state[1] if isinstance(state, tuple) else state)
        return torch.stack(outs)


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell, nn.RNNCell])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_cells_match_float64(cls, bias, counters):
    torch.manual_seed(0)
    assert_matches_float64(CellSteps(cls, bias), [torch.randn(3, BATCH, FEATURES),
                                                  torch.randn(BATCH, HIDDEN),
                                                  torch.randn(BATCH, HIDDEN)])
    assert counters().get("fallbacks", 0) == 0


class PackedClassifier(nn.Module):
    """Variable-length sequences through a packed LSTM / GRU, last hidden
    state of each into a linear head."""

    def __init__(self, cls):
        super().__init__()
        self.rnn = cls(FEATURES, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, 2)

    def forward(self, x):
        lengths = torch.tensor([5, 3, 2])
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        out, h = self.rnn(packed)
        h = h[0] if isinstance(h, tuple) else h
        padded, _ = pad_packed_sequence(out, batch_first=True)
        return self.head(h[-1]) + padded.sum()


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU])
def test_packed_sequences_match_float64(cls, counters):
    torch.manual_seed(0)
    assert_matches_float64(PackedClassifier(cls), [torch.randn(BATCH, SEQ, FEATURES)])
    assert counters().get("fallbacks", 0) == 0


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
def test_a_sequence_length_seen_before_hits_the_compile_cache(cls, counters):
    torch.manual_seed(0)
    m = cls(FEATURES, HIDDEN).to("disc")
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def train_step(length):
        opt.zero_grad()
        out, _ = m(torch.randn(length, BATCH, FEATURES).to("disc"))
        loss = out.square().mean()
        loss.backward()
        opt.step()
        return loss.item()

    for length in (4, 7, 4, 7):
        train_step(length)
    torch_disc.sync()
    compiles = counters()["compiles"]
    for length in (7, 4, 7, 4):
        train_step(length)
    assert counters()["compiles"] == compiles
    assert counters().get("fallbacks", 0) == 0


LAYER_OP = {nn.LSTM: "aten::mkldnn_rnn_layer(", nn.GRU: "disc::rnn_layer(",
            nn.RNN: "disc::rnn_layer("}


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU, nn.RNN])
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_one_op_per_layer_and_direction_not_per_time_step(cls, layers, bidirectional, counters):
    m = cls(FEATURES, HIDDEN, num_layers=layers, bidirectional=bidirectional).to("disc")
    traced = []
    for length in (5, 5, 50):  # the first step creates the grads, later ones add
        before = counters()["ops_traced"]
        out, _ = m(torch.randn(length, BATCH, FEATURES).to("disc"))
        out.sum().backward()
        traced.append(counters()["ops_traced"] - before)
        graph = torch_disc.graph_text(out)
        assert graph.count(LAYER_OP[cls]) == layers * (2 if bidirectional else 1)
        assert "_thnn_fused" not in graph
        torch_disc.sync()
    assert traced[1] == traced[2]
    assert counters().get("fallbacks", 0) == 0


class WithInitialState(nn.Module):
    """The layer from a given initial state, whose gradient is checked too."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, h0):
        out, h = self.layer(x, h0)
        return out.sum((0, 2)) + h.sum((0, 2))


RNN_VARIANTS = {
    "rnn relu": lambda: nn.RNN(FEATURES, HIDDEN, nonlinearity="relu"),
    "rnn no bias": lambda: nn.RNN(FEATURES, HIDDEN, bias=False),
    "gru no bias": lambda: nn.GRU(FEATURES, HIDDEN, bias=False),
    "gru 3 layers": lambda: nn.GRU(FEATURES, HIDDEN, num_layers=3),
}


@pytest.mark.parametrize("case", sorted(RNN_VARIANTS) + ["gru initial state", "rnn initial state"])
def test_gru_and_rnn_variants_match_float64(case, counters):
    torch.manual_seed(0)
    x = torch.randn(SEQ, BATCH, FEATURES)
    if case.endswith("initial state"):
        cls = nn.GRU if case.startswith("gru") else nn.RNN
        module = WithInitialState(cls(FEATURES, HIDDEN, bidirectional=True))
        assert_matches_float64(module, [x, torch.randn(2, BATCH, HIDDEN)])
    else:
        assert_matches_float64(RNN_VARIANTS[case](), [x])
    assert counters().get("fallbacks", 0) == 0


@pytest.mark.parametrize("case", ["eval-mode grads", "no grad", "projection"])
def test_lstm_variants_match_float64(case, counters):
    # eval(): oneDNN keeps its workspace only when asked, and an eval-mode
    # module can still be differentiated. proj_size: the composite path.
    torch.manual_seed(0)
    module = nn.LSTM(FEATURES, HIDDEN, proj_size=4 if case == "projection" else 0)
    if case != "projection":
        module.eval()
    x = torch.randn(SEQ, BATCH, FEATURES)
    if case == "no grad":
        with torch.no_grad():
            exact = module.double()(x.double())[0]
            disc = copy.deepcopy(module).float().to("disc")(x.to("disc"))[0].cpu()
        torch.testing.assert_close(disc.double(), exact, rtol=1e-5, atol=1e-5)
    else:
        assert_matches_float64(module, [x])
    assert counters().get("fallbacks", 0) == 0


def test_bf16_lstm_gradients_are_traced_in_the_cpu_kernels_dtype(counters):
    # Under bf16 autocast ATen's CPU mkldnn_rnn_layer_backward returns every
    # gradient in f32 where its meta kernel says bf16. The trace takes the
    # CPU kernel's dtypes (aten_ops.def), so autograd casts each gradient to
    # its input's dtype as in eager: eager's parameters to the bit, and the
    # graph never meets a dtype it did not trace (a kernel once read those
    # f32 bytes as bf16: parameters of 1e30 after one step).
    torch.manual_seed(0)
    lstm = nn.LSTM(16, 24, batch_first=True)
    x = torch.randn(4, 8, 16)

    def step(device):
        m = copy.deepcopy(lstm).to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            out = m(x.to(device))[0]
        out.float().pow(2).mean().backward()
        with torch.no_grad():
            for p in m.parameters():
                p.sub_(0.01 * p.grad)
        return [p.detach().cpu() for p in m.parameters()]

    want = step("cpu")
    got = step("disc")
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    c = counters()
    assert not [k for k in c if k.startswith("replay.dtype_mismatches")]
    assert c.get("launches.dtype_casts", 0) == 0
    assert c["launches.fused"] >= 4 and c["fallbacks"] == 0
