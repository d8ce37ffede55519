"""PyTorch's own ModuleInfo database (``module_db``) on disc vs CPU eager.

Each test is one ModuleInfo sample in float32, in training or eval mode:
the module is built on the CPU from the sample's constructor arguments,
built again with those arguments on disc and given the CPU module's state,
and both run the sample's forward; then the backward of a fixed random
weighting of the float outputs. Outputs, the inputs' gradients and the
parameters' gradients must match, and nothing may run on the CPU fallback.

Lazy modules (``nn.LazyConv2d``) are moved to disc uninitialized, as a
user's model is, and initialize there on their first forward; their state
is then set to the CPU module's so that the comparison is exact.
"""
import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_disc  # noqa: F401 - registers the disc device
from torch_disc import metrics

pytest.importorskip("expecttest", reason="module_db needs expecttest (scripts/setup.sh installs it)")
from torch.testing._internal.common_modules import module_db  # noqa: E402

SAMPLES = 3  # per module and mode
TOL = dict(rtol=1e-4, atol=1e-5, equal_nan=True)


def moved(device, value):
    """``value`` with its tensors copied to ``device`` (leaves keep
    requires_grad)."""
    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().to(device).requires_grad_(t.requires_grad)
    return tree_map(move, value)


def params():
    out = []
    for info in module_db:
        for training in (True, False):
            mode = "train" if training else "eval"
            try:
                samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32,
                                                  requires_grad=True, training=training)
            except Exception as e:  # the ModuleInfo itself, not the backend
                out.append(pytest.param(None, None, None, id=f"{info.name}-{mode}-nosamples",
                                        marks=pytest.mark.skip(reason=f"samples raised {e!r:.100}")))
                continue
            samples = [s for s in samples if s.forward_input is not None][:SAMPLES]
            for k, sample in enumerate(samples):
                out.append(pytest.param(info, training, sample, id=f"{info.name}-{mode}-s{k}"))
    return out


def tensors(value):
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def build(info, sample, device, training):
    ctor = sample.constructor_input
    torch.manual_seed(0)
    module = info.module_cls(*moved(device, ctor.args), **moved(device, ctor.kwargs)).to(device)
    return module.train(training)


def is_lazy(module):
    return any(torch.nn.parameter.is_lazy(t) for t in [*module.parameters(), *module.buffers()])


def forward(module, sample, device):
    args, kwargs = moved(device, sample.forward_input.args), moved(device, sample.forward_input.kwargs)
    torch.manual_seed(1)
    return module(*args, **kwargs), tensors((args, kwargs))


@pytest.mark.parametrize("info,training,sample", params())
def test_module_matches_cpu(info, training, sample):
    cpu = build(info, sample, "cpu", training)
    disc = build(info, sample, "disc", training)
    if is_lazy(cpu):
        with torch.no_grad():
            forward(cpu, sample, "cpu")
            forward(disc, sample, "disc")
        assert not is_lazy(disc)
        assert all(t.device.type == "disc" for t in [*disc.parameters(), *disc.buffers()])
    disc.load_state_dict(cpu.state_dict())
    metrics.reset()

    try:
        out_cpu, in_cpu = forward(cpu, sample, "cpu")
    except Exception as e:  # a sample CPU eager itself rejects
        pytest.skip(f"CPU eager raised {type(e).__name__}: {str(e)[:200]}")
    out_disc, in_disc = forward(disc, sample, "disc")
    outs_cpu, outs_disc = tensors(out_cpu), tensors(out_disc)
    assert len(outs_disc) == len(outs_cpu)
    for d, c in zip(outs_disc, outs_cpu):
        assert d.device.type == "disc"
        torch.testing.assert_close(d.detach().cpu(), c.detach(), **TOL)

    grads = [(d, c) for d, c in zip(outs_disc, outs_cpu) if c.requires_grad and c.is_floating_point()]
    if grads:
        g = torch.Generator().manual_seed(2)
        weights = [torch.randn(c.shape, generator=g) for _, c in grads]
        sum((c * w).sum() for (_, c), w in zip(grads, weights)).backward()
        sum((d * w.to("disc")).sum() for (d, _), w in zip(grads, weights)).backward()
        leaves_cpu = [t for t in in_cpu if t.requires_grad] + list(cpu.parameters())
        leaves_disc = [t for t in in_disc if t.requires_grad] + list(disc.parameters())
        for d, c in zip(leaves_disc, leaves_cpu):
            assert (d.grad is None) == (c.grad is None)
            if c.grad is not None:
                torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL)
    assert metrics.fallbacks() == {}
