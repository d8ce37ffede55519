"""PyTorch's own OpInfo samples (``op_db``) on disc vs CPU eager.

Each test is one OpInfo sample of one op, in float32 (the ``QUICK`` ops in
bfloat16 and float16 as well, ids ending in the dtype, within a few units of
the dtype's last place):

* ``test_forward``: the op on the CPU sample (the reference) and on a copy of
  it moved to ``"disc"`` (traced, run at the ``.cpu()`` sync); every output
  must match, and be a disc tensor.
* ``test_backward`` (ops with ``supports_autograd``): the sample's
  ``requires_grad`` tensors become disc leaves, the loss is
  ``sum((out * w).sum())`` over the differentiable float outputs with a fixed
  random ``w`` per output; the outputs and the grad of every leaf must match.

Both also require that nothing ran on the CPU fallback (the counters are
reset before the disc side runs), except the data-dependent fallbacks listed
in ``ALLOWED_FALLBACKS`` (whose results are still compared).

What runs:

* by default (CI) the ``QUICK`` ops below, with at most ``QUICK_SAMPLES``
  samples each: the ops a training step traces;
* ``DISC_SWEEP=all``: every op in ``op_db`` that has a float32 variant, with
  at most ``DISC_SWEEP_SAMPLES`` (default ``FULL_SAMPLES``) samples each.
  ``make sweep`` runs that and writes the pass/fail/skip table to
  ``results/sweep.md`` (see ``sweep_report.py``).

Known failures are listed, with a reason each, in ``XFAIL`` (strict: a fixed
one fails as XPASS, so that the entry gets removed), and in ``SKIP`` for cases
that crash or hang the process, which an xfail cannot catch; both match
samples by what they are, not by index. Ops whose results cannot be compared
with an independent CPU run (random, uninitialized) are skipped.
"""

import gc
import itertools
import traceback
import zlib

import pytest
import torch
from torch.utils._pytree import tree_flatten

import torch_disc  # noqa: F401 - registers the disc device
from torch_disc import metrics

pytest.importorskip("expecttest", reason="op_db needs expecttest (scripts/setup.sh installs it)")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402

DTYPE = torch.float32
# The quick ops run in bf16 and f16 as well, which generated kernels compute
# in f32 and round after every op (codegen/cpu/bfloat16.cpp, float16.cpp).
REDUCED = (torch.bfloat16, torch.float16)
FULL = torch_disc.options.get("DISC_SWEEP") == "all"
MAX_SAMPLES = torch_disc.options.get("DISC_SWEEP_SAMPLES")

# (rtol, atol) for float32 results. The executor replays ATen CPU kernels and
# fused element-wise groups run generated code, so results are close but not
# always bitwise equal (reordered sums, exp/tanh from the generated code).
TOL = (1e-5, 1e-5)
# bf16 and f16: a few units of their last place (2^-8, 2^-11 relative).
TOL_REDUCED = {torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}
TOL_BY_OP = {
    # Its backward is a long chain of products of reflectors; sums run in
    # another order on disc: 6e-4 on values near 60 (relative 1.04e-5).
    "linalg.householder_product": (2e-5, 1e-5),
}

# ----------------------------------------------------------------------------
# The ops of the quick (CI) subset: "name" or "name.variant", as OpInfo names
# them. Element-wise, reductions, the matmul family, views, indexing, softmax,
# normalization and losses: what a training step traces.

QUICK = [
    # element-wise
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "abs", "exp", "log", "sqrt", "rsqrt",
    "reciprocal", "tanh", "sigmoid", "pow", "clamp", "maximum", "minimum", "where", "masked_fill",
    "lt", "eq", "addcmul", "addcdiv", "lerp",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.leaky_relu",
    "nn.functional.softplus",
    # reductions
    "sum", "mean", "amax", "amin", "max.reduction_with_dim", "var", "std", "prod", "argmax",
    "cumsum", "topk", "sort",
    # matmul family
    "mm", "bmm", "addmm", "baddbmm", "matmul", "einsum", "nn.functional.linear",
    # views and layout
    "view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
    "flatten", "narrow", "select", "split", "chunk", "cat", "stack", "clone", "contiguous",
    # indexing
    "index_select", "gather", "scatter", "scatter_add", "index_add", "index_put", "__getitem__",
    "nn.functional.embedding",
    # softmax, normalization, convolution and pooling, losses
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.cross_entropy", "nn.functional.nll_loss",
    "nn.functional.mse_loss",
]

# Ops whose results cannot be compared with an independent CPU run: random
# draws, uninitialized memory. Matched against the OpInfo name's parts.
NOT_COMPARABLE = {
    "empty": "uninitialized memory", "empty_like": "uninitialized memory",
    "new_empty": "uninitialized memory", "empty_strided": "uninitialized memory",
    "new_empty_strided": "uninitialized memory", "empty_permuted": "uninitialized memory",
    "bernoulli": "random", "multinomial": "random", "normal": "random", "rand_like": "random",
    "randn_like": "random", "randint_like": "random", "randint": "random", "randn": "random",
    "rand": "random", "uniform": "random", "cauchy": "random", "exponential": "random",
    "geometric": "random", "log_normal": "random", "dropout": "random",
    "dropout2d": "random", "dropout3d": "random", "alpha_dropout": "random",
    "feature_alpha_dropout": "random", "rrelu": "random", "gumbel_softmax": "random",
    "fractional_max_pool2d": "random", "fractional_max_pool3d": "random",
}

# Known failures and cases not run, by what the sample is:
# (ops, directions, predicate(sample), reason). An XFAIL is strict (once
# fixed it fails as XPASS, so that the entry gets removed) unless its reason
# says "(may pass)". SKIP is for cases that crash or hang the process, which
# an xfail cannot catch.


def normalizes_one_element(sample):
    shape = sample.args[0] if sample.args else sample.kwargs["normalized_shape"]
    n = 1
    for d in shape:
        n *= d
    return n == 1


XFAIL = [
    # Not strict: whether x - mean rounds to exactly 0 depends on the value.
    (("nn.functional.layer_norm",), ("fwd", "bwd"), normalizes_one_element,
     "numerics (may pass): layer_norm over one element (variance 0) is exactly 0 on CPU; disc "
     "runs PyTorch's math decomposition (native_batch_norm of the reshaped input), whose "
     "x - mean can leave ~ulp(x) * rstd (rstd = 1/sqrt(eps) = 316): 2.3e-6 for x = 0.7"),
]

def any_sample(sample):
    return True


def is_reduced_float(sample):
    return sample.input.dtype in REDUCED


XFAIL += [
    (("nn.functional.conv2d",), ("bwd",), is_reduced_float,
     "numerics (may pass): disc widens f16 convolutions (and bf16 ones where the CPU lacks "
     "native bf16) to f32 and rounds once; eager's backward is the less precise of the two "
     "(f16 s1, input grad's max error against float64: eager 0.035, disc 0.012), beyond the "
     "dtype's tolerance on some elements"),
]


XFAIL += [
    (("chalf",), ("fwd",), any_sample,
     "disc has no complex32 (ComplexHalf) dtype: a clear error naming the dtype"),
    (("hash_tensor",), ("fwd",), any_sample,
     "disc has no uint64 dtype: a clear error naming the dtype"),
    (("sparse.mm.reduce", "sparse.sampled_addmm", "to_sparse"), ("fwd", "bwd"), any_sample,
     "disc tensors are strided only: sparse layouts raise PyTorch's NotImplementedError "
     "naming the op and the Sparse(Csr)disc backend"),
]

SKIP = []  # (ops, directions, predicate, reason), as XFAIL; none at present


def has_bool_index(sample):
    return any(t.dtype == torch.bool for t in tensors_in(sample))


# CPU fallbacks that a case may take, its results still compared:
# (op, "fwd" | "bwd", predicate(sample) or None for all, fallback ops, reason).
# Each is an op whose result shape, or the path its backward takes, depends on
# tensor values, which only the fallback can run.
ALLOWED_FALLBACKS = [
    ("masked_fill", "bwd", None, {"aten::masked_select"},
     "the grad of a tensor fill value is grad.masked_select(mask).sum()"),
    ("index_put", "bwd", has_bool_index, {"aten::index.Tensor"},
     "the grad of the values is grad[mask] for a boolean mask"),
    ("prod", "bwd", None, {"aten::nonzero"},
     "prod's backward branches on (input == 0).nonzero()"),
    ("cumprod", "bwd", None, {"aten::masked_select"},
     "cumprod's backward for inputs with zeros gathers them with masked_select"),
    ("index_fill", "bwd", None, {"aten::_unique"},
     "the grad of a tensor fill value sums the grad over the unique indices"),
    ("nonzero", "fwd", None, {"aten::nonzero"}, "one row per nonzero element"),
    ("argwhere", "fwd", None, {"aten::nonzero"}, "one row per nonzero element"),
    ("unique", "fwd", None, {"aten::_unique2"}, "one element per distinct value"),
    ("unique_consecutive", "fwd", None, {"aten::unique_consecutive"},
     "one element per run of equal values"),
    ("masked_select", "fwd", None, {"aten::masked_select"}, "one element per true mask entry"),
    ("masked_select", "bwd", None, {"aten::masked_select"}, "one element per true mask entry"),
    ("masked_scatter", "bwd", None, {"aten::masked_select"},
     "the grad of source is grad.masked_select(mask)"),
    ("combinations", "fwd", None, {"aten::masked_select"},
     "picks its index tuples with masked_select"),
    ("combinations", "bwd", None, {"aten::masked_select"},
     "picks its index tuples with masked_select"),
    ("repeat_interleave", "fwd", None, {"aten::repeat_interleave.Tensor"},
     "the result's length is the sum of the repeats"),
    ("repeat_interleave", "bwd", None, {"aten::repeat_interleave.Tensor"},
     "the result's length is the sum of the repeats"),
    ("linalg.lstsq", "fwd", None, {"aten::linalg_lstsq.out"},
     "residuals are empty unless every matrix has full rank: their shape depends on values"),
    ("linalg.lstsq", "bwd", None, {"aten::linalg_lstsq.out"},
     "residuals are empty unless every matrix has full rank: their shape depends on values"),
    ("linalg.lstsq.grad_oriented", "fwd", None, {"aten::linalg_lstsq.out"},
     "residuals are empty unless every matrix has full rank: their shape depends on values"),
    ("linalg.lstsq.grad_oriented", "bwd", None, {"aten::linalg_lstsq.out"},
     "residuals are empty unless every matrix has full rank: their shape depends on values"),
    ("equal", "fwd", None, {"aten::equal"}, "returns a Python bool: a read on the host"),
    ("cov", "fwd", None, {"aten::equal"}, "checks its weights with torch.equal on the host"),
    ("cov", "bwd", None, {"aten::equal"}, "checks its weights with torch.equal on the host"),
    ("corrcoef", "fwd", None, {"aten::equal"}, "cov's torch.equal check on the host"),
    ("corrcoef", "bwd", None, {"aten::equal"}, "cov's torch.equal check on the host"),
]

# ----------------------------------------------------------------------------
# Collection: one parameter per (op, sample).


def op_key(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def selected_ops():
    by_key = {op_key(op): op for op in op_db}
    if FULL:
        keys = list(by_key)
    else:
        missing = [k for k in QUICK if k not in by_key]
        assert not missing, f"not in op_db: {missing}"
        keys = QUICK
    # The sweep driver (sweep_report.py) runs a chunk of ops at a time, and
    # after a crash the ops it has left.
    only = torch_disc.options.get("DISC_SWEEP_OPS")
    if only:
        only = set(only.split(","))
        keys = [k for k in keys if k in only]
    return [by_key[k] for k in keys]


def not_comparable(op):
    for part in op.name.split(".") + [op.variant_test_name]:
        if part in NOT_COMPARABLE:
            return NOT_COMPARABLE[part]
    return None


def draws_random(op, sample):
    """Samples of deterministic ops that ask for dropout."""
    if sample.kwargs.get("dropout_p", 0) > 0:
        return True
    if op.name == "nn.functional.multi_head_attention_forward":
        return sample.kwargs.get("training", True) and sample.args[9] > 0  # dropout_p
    return False


# Tensor arguments that the op needs on the CPU, where eager requires them
# there: op -> the positions in ``sample.args``.
CPU_ARGS = {"tensor_split": (0,)}


_SAMPLES = {}


def samples_of(op, dtype=DTYPE):
    """The op's first MAX_SAMPLES samples in `dtype`, from a seed of its own
    (adding or reordering ops never changes another op's samples); the
    global RNG is left as it was."""
    key = op_key(op)
    if (key, dtype) not in _SAMPLES:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(zlib.crc32(key.encode()))
            gen = op.sample_inputs("cpu", dtype, requires_grad=op.supports_autograd)
            _SAMPLES[key, dtype] = list(itertools.islice(gen, MAX_SAMPLES))
    return _SAMPLES[key, dtype]


def tolerance(op, dtype):
    return TOL_REDUCED[dtype] if dtype in TOL_REDUCED else TOL_BY_OP.get(op_key(op), TOL)


def lookup(table, key, direction, sample):
    """The reason of the table's first entry that matches, or None."""
    return next((why for ops, dirs, pred, why in table
                 if key in ops and direction in dirs and pred(sample)), None)


def params(direction):
    """(op, sample, dtype) of every selected op in float32, and of the quick
    ops in REDUCED (ids ending in the dtype's name)."""
    out = []
    for op in selected_ops():
        out += dtype_params(op, direction, DTYPE, "")
        if op_key(op) in QUICK:
            for dtype in REDUCED:
                out += dtype_params(op, direction, dtype, "-" + str(dtype).removeprefix("torch."))
    return out


def dtype_params(op, direction, dtype, suffix):
    out = []
    key = op_key(op)
    if direction == "bwd" and not op.supports_autograd:
        return out
    if dtype not in op.dtypes:
        if dtype == DTYPE:
            out.append(pytest.param(None, None, None, id=f"{key}-nodtype",
                                    marks=pytest.mark.skip(reason="no float32 variant")))
        return out
    reason = not_comparable(op)
    if reason:
        out.append(pytest.param(None, None, None, id=f"{key}-all{suffix}",
                                marks=pytest.mark.skip(reason=f"not comparable: {reason}")))
        return out
    try:
        samples = samples_of(op, dtype)
    except Exception as e:  # the OpInfo itself, not the backend
        out.append(pytest.param(None, None, None, id=f"{key}-nosamples{suffix}",
                                marks=pytest.mark.skip(reason=f"sample_inputs raised {e!r:.100}")))
        return out
    for i, sample in enumerate(samples):
        marks = []
        if draws_random(op, sample):
            marks.append(pytest.mark.skip(reason="not comparable: random (dropout)"))
        why = lookup(SKIP, key, direction, sample)
        if why:
            marks.append(pytest.mark.skip(reason=why))
        why = lookup(XFAIL, key, direction, sample)
        if why:
            marks.append(pytest.mark.xfail(reason=why, strict="(may pass)" not in why))
        out.append(pytest.param(op, sample, dtype, id=f"{key}-s{i}{suffix}", marks=marks))
    return out


# ----------------------------------------------------------------------------
# Running and comparing.


def call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def reference(op, sample):
    """The CPU result; a sample that CPU eager itself rejects is skipped."""
    try:
        return call(op, sample)
    except Exception as e:
        pytest.skip(f"CPU eager raised {type(e).__name__}: {str(e)[:200]}")


def tensor_map(f, v):
    """``v`` with ``f`` applied to every tensor in it (lists, tuples and dicts
    are walked; other values, torch.Size included, are kept as they are)."""
    if isinstance(v, torch.Tensor):
        return f(v)
    if type(v) in (list, tuple):
        return type(v)(tensor_map(f, x) for x in v)
    if isinstance(v, dict):
        return {k: tensor_map(f, x) for k, x in v.items()}
    return v


def tensors_in(sample):
    """The sample's tensors, in a fixed order."""
    found = []
    tensor_map(found.append, (sample.input, sample.args, sample.kwargs))
    return found


def to_disc(sample, grad, op=None):
    """The sample with its tensors moved to disc; with ``grad``, tensors that
    require grad become disc leaves (as a model's parameters are). A tensor
    passed twice stays one tensor; a view stays a view of its storage."""
    moved = {}
    for k in CPU_ARGS.get(op.name if op is not None else None, ()):
        if k < len(sample.args) and isinstance(sample.args[k], torch.Tensor):
            moved[id(sample.args[k])] = sample.args[k]

    def move(v):
        if id(v) not in moved:
            if v._base is not None:
                # A view moves with its whole storage, so that ops reading the
                # storage (as_strided with an offset) see the same memory.
                d = v._base.detach().to("disc").as_strided(v.size(), v.stride(), v.storage_offset())
            else:
                d = v.detach().to("disc")
            moved[id(v)] = d.requires_grad_() if grad and v.requires_grad else d
        return moved[id(v)]

    return SampleInput(tensor_map(move, sample.input), args=tensor_map(move, sample.args),
                       kwargs=tensor_map(move, sample.kwargs),
                       output_process_fn_grad=sample.output_process_fn_grad)


def names_a_device(sample):
    leaves, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return any(isinstance(v, (torch.device, str)) and str(v).startswith(("cpu", "cuda")) for v in leaves)


def fallback_problem(allowed=frozenset()):
    fb = {op: n for op, n in metrics.fallbacks().items() if op not in allowed}
    return f"{sum(fb.values())} CPU fallback(s): {fb}" if fb else None


def fetch(values):
    """``values`` flattened, each tensor synced and copied to CPU, as
    ``(device type, value)`` pairs."""
    flat, _ = tree_flatten(values)
    return [(v.device.type, v.detach().cpu()) if isinstance(v, torch.Tensor) else (None, v) for v in flat]


def compare(label, fetched, expected, tol, device_checked=True):
    """None when ``fetched`` (a disc result from ``fetch``) matches
    ``expected``, else a summary."""
    device, actual = fetched
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{label}: {type(actual).__name__}, expected a tensor"
        if device_checked and expected.device.type == "cpu" and device != "disc":
            return f"{label}: on {device}, expected disc"
        inexact = expected.dtype.is_floating_point or expected.dtype.is_complex
        kw = dict(rtol=tol[0], atol=tol[1]) if inexact else dict(rtol=0, atol=0)
        try:
            torch.testing.assert_close(actual, expected.detach(), equal_nan=True, **kw)
        except AssertionError as e:
            return f"{label}: {e}"
        return None
    if actual != expected:
        return f"{label}: {actual!r}, expected {expected!r}"
    return None


def compare_outputs(fetched, expected, tol, device_checked):
    e, _ = tree_flatten(expected)
    if len(fetched) != len(e):
        return [f"{len(fetched)} outputs, expected {len(e)}"]
    return [compare(f"output {i}", x, y, tol, device_checked) for i, (x, y) in enumerate(zip(fetched, e))]


def allowed_fallbacks(op, sample, direction):
    allowed = set()
    for key, d, pred, ops, _ in ALLOWED_FALLBACKS:
        if key == op_key(op) and d == direction and (pred is None or pred(sample)):
            allowed |= ops
    return allowed


def report(problems, fallbacks=None):
    """Fails with every problem; when the results match and only CPU
    fallbacks happened, says so first (the sweep's table counts those apart)."""
    problems = [p for p in problems if p]
    if fallbacks and not problems:
        pytest.fail(f"CPU fallback only, results match: {fallbacks}")
    problems += [fallbacks] if fallbacks else []
    assert not problems, "\n\n".join(problems)


def run_disc(fn):
    """Runs the disc side of a test, which returns CPU values only: no disc
    tensor outlives it. Its exception comes back as an AssertionError with
    the exception's text and traceback as text, not as the exception: that
    would keep the failed graph's pending tensors alive (pytest keeps the last
    failure), and every later sync, which runs every live pending tensor,
    would fail again."""
    try:
        return fn()
    except Exception as e:
        where = "".join(traceback.format_exception(e))[-3000:]
        message = (f"disc run raised {type(e).__name__}: {str(e)[:2000]}\n"
                   f"fallbacks so far: {fallback_problem()}\n\n{where}")
    gc.collect()
    raise AssertionError(message)


@pytest.mark.parametrize("op,sample,dtype", params("fwd"))
def test_forward(op, sample, dtype):
    tol = tolerance(op, dtype)
    with torch.no_grad():
        expected = reference(op, sample)
        metrics.reset()
        actual = run_disc(lambda: fetch(call(op, to_disc(sample, grad=False, op=op))))
    problems = compare_outputs(actual, expected, tol, not names_a_device(sample))
    report(problems, fallback_problem(allowed_fallbacks(op, sample, "fwd")))


def weighted_loss(outs, weights):
    loss = None
    for o, w in zip(outs, weights):
        if w is not None:
            term = (o * w).sum()
            loss = term if loss is None else loss + term
    return loss


def differentiable(outs):
    return [isinstance(o, torch.Tensor) and o.dtype.is_floating_point and o.requires_grad for o in outs]


@pytest.mark.parametrize("op,sample,dtype", params("bwd"))
def test_backward(op, sample, dtype, request):
    tol = tolerance(op, dtype)
    cpu_tensors = tensors_in(sample)
    leaf_idx = [i for i, t in enumerate(cpu_tensors) if t.requires_grad]
    if not leaf_idx:
        pytest.skip("sample has no input that requires grad")
    cpu_leaves = [cpu_tensors[i] for i in leaf_idx]
    expected = sample.output_process_fn_grad(reference(op, sample))
    cpu_outs, _ = tree_flatten(expected)
    mask = differentiable(cpu_outs)
    if not any(mask):
        pytest.skip("no differentiable float output")
    gen = torch.Generator().manual_seed(zlib.crc32(request.node.callspec.id.encode()))
    weights = [torch.randn(o.shape, dtype=o.dtype, generator=gen) if m else None
               for o, m in zip(cpu_outs, mask)]
    cpu_loss = weighted_loss(cpu_outs, weights)
    cpu_grads = torch.autograd.grad(cpu_loss, cpu_leaves, allow_unused=True)

    def disc_side():
        disc_sample = to_disc(sample, grad=True, op=op)
        disc_tensors = tensors_in(disc_sample)
        outs, _ = tree_flatten(sample.output_process_fn_grad(call(op, disc_sample)))
        if len(outs) != len(cpu_outs):
            return fetch(outs), None, None
        loss = weighted_loss(outs, [None if w is None else w.to(o.device) for o, w in zip(outs, weights)])
        grads = torch.autograd.grad(loss, [disc_tensors[i] for i in leaf_idx], allow_unused=True)
        return fetch(outs), fetch(loss)[0], [None if g is None else fetch(g)[0] for g in grads]

    metrics.reset()
    actual, disc_loss, disc_grads = run_disc(disc_side)
    problems = compare_outputs(actual, expected, tol, not names_a_device(sample))
    if disc_grads is not None:
        problems.append(compare("loss", disc_loss, cpu_loss, tol, not names_a_device(sample)))
        for n, (g, e) in enumerate(zip(disc_grads, cpu_grads)):
            if (g is None) != (e is None):
                problems.append(f"grad of leaf {n}: disc {'None' if g is None else 'set'}, "
                                f"cpu {'None' if e is None else 'set'}")
            elif g is not None:
                problems.append(compare(f"grad of leaf {n}", g, e, tol))
    report(problems, fallback_problem(allowed_fallbacks(op, sample, "bwd")))
