"""Dtypes CUDA's kernels take and CPU's do not, on disc.

Libraries treat disc as an accelerator and send it what they send CUDA
(transformers' integer ``histc`` in mixture-of-experts layers). For every
op in ``op_db`` whose ``dtypesIfCUDA`` holds dtypes its CPU ``dtypes`` do
not, each such dtype's samples run on disc and either

* match CPU eager run on the inputs upcast to a dtype CPU takes (float32
  for 16-bit floats, float64 for integers, complex64 for complex32) with
  the result cast back, or
* fail with an error that names the dtype: when the tensor moves to disc
  (disc has no complex32), at the user's call (ATen's own check, as for
  float16 FFTs), or, raised later by the graph, naming the ATen op too, or
  as CPU eager fails on the same sample in its own dtype (integer % 0).

Which of the two each op does today is pinned in ``WORKS`` (the rest must
fail clearly), so that a change of either kind shows up here.
"""
import itertools
import zlib

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

import torch_disc  # noqa: F401 - registers the disc device

pytest.importorskip("expecttest", reason="op_db needs expecttest (scripts/setup.sh installs it)")
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

SAMPLES = 3
# CUDA-only kernels (their samples need CUDA), and random ops whose draws an
# independent CPU run cannot reproduce.
NOT_RUN = {"torch.ops.aten._flash_attention_forward", "torch.ops.aten._efficient_attention_forward",
           "nn.functional.rrelu", "nn.functional.batch_norm.without_cudnn"}
UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32,
          torch.complex32: torch.complex64, torch.bool: torch.float32}
TOL = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-2), torch.complex32: (1e-3, 1e-3)}
# Ops whose extra dtypes run on disc today (ATen's CPU kernel takes more
# than op_db declares, or disc widens them: lazy_backend/exec/widened_dtypes).
WORKS = {
    "histc",  # integers, counted in float64 (widened)
    # ATen's CPU kernel takes these although op_db does not declare it
    "__rmod__", "round.decimals_3", "round.decimals_neg_3",
    "polygamma.polygamma_n_1", "polygamma.polygamma_n_2", "polygamma.polygamma_n_3",
    "polygamma.polygamma_n_4",
}


def key(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def extra_dtypes(op):
    cuda = set(op.dtypesIfCUDA) if op.dtypesIfCUDA is not None else set(op.dtypes)
    return sorted(cuda - set(op.dtypes), key=str)


def cases():
    out = []
    for op in op_db:
        if key(op) in NOT_RUN:
            continue
        for dtype in extra_dtypes(op):
            name = f"{key(op)}-{str(dtype).replace('torch.', '')}"
            out.append(pytest.param(op, dtype, id=name))
    return out


def upcast_dtype(dtype):
    if dtype in UPCAST:
        return UPCAST[dtype]
    return torch.float64 if not dtype.is_floating_point and not dtype.is_complex else dtype


def samples(op, dtype):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(zlib.crc32(f"{key(op)}{dtype}".encode()))
        try:
            return list(itertools.islice(op.sample_inputs("cpu", dtype), SAMPLES))
        except Exception as e:  # the OpInfo itself cannot make them on CPU
            pytest.skip(f"sample_inputs raised {e!r:.100}")


def mapped(sample, f):
    return tree_map(lambda v: f(v) if isinstance(v, torch.Tensor) else v,
                    (sample.input, sample.args, sample.kwargs))


def call(op, args):
    x, a, k = args
    return op(x, *a, **k)


ATEN_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.complex32: "ComplexHalf",
              torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short",
              torch.int32: "Int", torch.int64: "Long"}


def names_dtype(message, dtype):
    return ATEN_NAMES[dtype] in message or str(dtype) in message


def disc_result(op, sample):
    """The op's results on disc as CPU tensors, or the error it gave with
    where it came from: "move" (disc refuses the dtype), "trace" (raised
    at the user's call: the traceback names the line) or "run" (raised by
    the graph, later)."""
    try:
        args = mapped(sample, lambda t: t.to("disc"))
    except Exception as e:
        return None, ("move", str(e))
    try:
        out = call(op, args)
    except Exception as e:
        return None, ("trace", str(e))
    try:
        return tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, out), None
    except Exception as e:
        return None, ("run", str(e))


def raises_on_cpu(op, sample, error):
    """Whether CPU eager, run on the sample as it is, raises the error disc
    gave (its exception type's name leads disc's message)."""
    try:
        call(op, mapped(sample, lambda t: t))
    except Exception as e:
        return error[1].startswith(type(e).__name__) or str(e) in error[1]
    return False


@pytest.mark.parametrize("op,dtype", cases())
def test_cuda_dtype_works_or_fails_clearly(op, dtype):
    wide = upcast_dtype(dtype)
    ran = 0
    for sample in samples(op, dtype):
        try:
            expected = call(op, mapped(sample, lambda t: t.to(wide) if t.dtype == dtype else t))
        except Exception:
            continue  # not a sample CPU computes even upcast
        got, error = disc_result(op, sample)
        ran += 1
        if error and raises_on_cpu(op, sample, error):
            continue  # CPU's own kernel takes the dtype and raises alike (integer % 0)
        if error:
            where, message = error
            assert key(op) not in WORKS, f"{key(op)} worked before: {message}"
            assert names_dtype(message, dtype), f"the error does not name {dtype}: {message}"
            # a graph's error comes long after the call: it must name the op
            assert where != "run" or "disc: in aten::" in message, f"the error names no op: {message}"
            continue
        assert key(op) in WORKS, f"{key(op)} on {dtype} works now: add it to WORKS"
        rtol, atol = TOL.get(dtype, (0, 0))
        for g, e in zip(tree_flatten(got)[0], tree_flatten(expected)[0]):
            if isinstance(e, torch.Tensor):
                e = e.to(g.dtype) if e.dtype == wide and g.dtype == dtype else e
                torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True,
                                           check_dtype=False)
    if not ran:
        pytest.skip("no sample that CPU computes upcast")
