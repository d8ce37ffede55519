"""Parity of traced disc ops with CPU eager, forward and backward.

Every case in ``CASES`` (ops_parity_cases/) is one function applied to a few inputs. The same
function runs twice: on CPU tensors (the reference) and on copies of the same
values moved to ``"disc"``, where the ops are traced and run at the ``.cpu()``
sync. The results must match:

* forward (``test_forward``): every output, and every input afterwards (so
  that in-place updates such as batch norm's running stats are checked too);
* backward (``test_backward``): for cases with a float output, the float
  inputs become leaves (on disc: ``x.detach().to("disc").requires_grad_()``),
  the loss is ``sum(out * w)`` with a fixed random ``w`` per output, and the
  loss and every leaf's ``.grad`` must match.

Both tests also require that nothing ran on the CPU fallback: the op set here
is what training uses, so a fallback is a missing capture, and the failure
names the ops from the ``fallback.<op>`` counters.

Tolerances only cover float reordering (rtol 1e-5 / atol 1e-6 for float32,
1e-7 for float64); integer and bool results must be exact. The executor
replays ATen CPU kernels, so most results are in fact bitwise equal.
"""

import zlib

import pytest
import torch

import torch_disc  # noqa: F401 - registers the disc device
from ops_parity_cases import CASES, TOLERANCE, materialize
from torch_disc import metrics

# ----------------------------------------------------------------------------
# Running and comparing.


def build(case_, salt=""):
    """The case's CPU inputs, from its own seeded generator."""
    gen = torch.Generator().manual_seed(zlib.crc32((case_.name + salt).encode()))
    return [materialize(s, gen) for s in case_.inputs]


def outputs(result):
    """The tensors a case returns, as a tuple."""
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def to_disc(v):
    return v.to("disc") if isinstance(v, torch.Tensor) else v


def from_disc(t, what):
    """Syncs and copies a disc result to CPU, checking it is a disc tensor."""
    assert t.device.type == "disc", f"{what} is on {t.device}, expected disc"
    return t.detach().cpu()


def mismatch(label, actual, expected, atol=0.0):
    """None when ``actual`` matches ``expected``, else a one-paragraph summary."""
    tol = TOLERANCE.get(expected.dtype, (0.0, 0.0))  # exact for integers and bool
    kw = {} if tol is None else dict(rtol=tol[0], atol=max(tol[1], atol))
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, **kw)
    except AssertionError as e:
        return f"{label}: {e}"
    return None


def fallback_problem():
    c = metrics.counters()
    if c.get("fallbacks", 0) == 0:
        return None
    ops = {k[len("fallback."):]: v for k, v in c.items() if k.startswith("fallback.")}
    return f"{c['fallbacks']} CPU fallback(s): {ops}"


def run_on_disc(fn):
    """Runs ``fn`` (the disc side of a case); an exception names the fallbacks
    that happened before it, since a fallback is a common cause."""
    try:
        return fn()
    except Exception as e:
        raise AssertionError(f"disc run raised {type(e).__name__}: {e}\n"
                             f"fallbacks so far: {fallback_problem()}") from e


def report(problems):
    problems = [p for p in problems if p]
    assert not problems, "\n\n".join(problems)


def weighted_loss(outs, weights):
    """sum(out * w) over the float outputs: every output element gets a
    distinct gradient, so a permuted or mis-strided grad cannot pass."""
    loss = 0
    for o, w in zip(outs, weights):
        if o.dtype.is_floating_point:
            loss = loss + (o * w).sum()
    return loss


@pytest.mark.parametrize("case_", CASES, ids=[c.name for c in CASES])
def test_forward(case_):
    inputs = build(case_)
    disc_inputs = [to_disc(v) for v in inputs]  # copies taken before the CPU run mutates anything
    expected = outputs(case_.fn(*inputs))

    metrics.reset()
    actual = run_on_disc(lambda: [from_disc(t, f"output {i}")
                                  for i, t in enumerate(outputs(case_.fn(*disc_inputs)))])
    after = run_on_disc(lambda: [from_disc(v, "input") if isinstance(v, torch.Tensor) else v
                                 for v in disc_inputs])

    problems = [f"{len(actual)} outputs, expected {len(expected)}" if len(actual) != len(expected) else None]
    problems += [mismatch(f"output {i}", a, e) for i, (a, e) in enumerate(zip(actual, expected))]
    # Inputs afterwards: in-place updates (running stats) must match too.
    problems += [mismatch(f"input {i} after the call", a, e)
                 for i, (a, e) in enumerate(zip(after, inputs)) if isinstance(e, torch.Tensor)]
    problems.append(fallback_problem())
    report(problems)


BACKWARD_CASES = [c for c in CASES if c.backward]


@pytest.mark.parametrize("case_", BACKWARD_CASES, ids=[c.name for c in BACKWARD_CASES])
def test_backward(case_):
    inputs = build(case_)
    leaves = case_.grad_indices()

    cpu_inputs = [v.detach().clone().requires_grad_() if i in leaves else v for i, v in enumerate(inputs)]
    # Disc leaves are created on disc, as a training loop's parameters are.
    disc_inputs = [v.detach().to("disc").requires_grad_() if i in leaves else to_disc(v)
                   for i, v in enumerate(inputs)]

    cpu_outs = outputs(case_.fn(*cpu_inputs))
    gen = torch.Generator().manual_seed(zlib.crc32((case_.name + "/w").encode()))
    weights = [torch.randn(o.shape, dtype=o.dtype, generator=gen) if o.dtype.is_floating_point else None
               for o in cpu_outs]
    cpu_loss = weighted_loss(cpu_outs, weights)
    assert isinstance(cpu_loss, torch.Tensor) and cpu_loss.requires_grad, \
        "case has no differentiable float output (mark it backward=False)"
    cpu_loss.backward()

    metrics.reset()

    def disc_side():
        outs = outputs(case_.fn(*disc_inputs))
        loss = weighted_loss(outs, [to_disc(w) for w in weights])
        loss.backward()
        grads = [None if disc_inputs[i].grad is None else from_disc(disc_inputs[i].grad, f"grad {i}")
                 for i in leaves]
        return from_disc(loss, "loss"), grads

    disc_loss, disc_grads = run_on_disc(disc_side)

    problems = [mismatch("loss", disc_loss, cpu_loss.detach())]
    for i, g in zip(leaves, disc_grads):
        expected = cpu_inputs[i].grad
        if expected is None or g is None:
            if (expected is None) != (g is None):
                problems.append(f"grad of input {i}: disc {'None' if g is None else 'set'}, "
                                f"cpu {'None' if expected is None else 'set'}")
            continue
        problems.append(mismatch(f"grad of input {i}", g, expected, case_.grad_atol))
    problems.append(fallback_problem())
    report(problems)
