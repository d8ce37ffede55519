"""Random op graphs for differential testing of the disc backend.

``generate(seed)`` builds a small random program (3-15 statements of Python
over ``torch``) from a seed, and ``run_graphs(seeds)`` runs every program on
disc under the compiled executor, on disc under the reference executor and on
CPU eager, and compares: compiled vs reference, and reference vs eager.
``tests/python/test_random_graphs.py`` runs it in CI; a bigger sweep imports
it (``make fuzz``, ``make sweep``), and ``python tests/python/random_graphs
--seed N`` replays one program and prints what it compared.

What a program holds
--------------------

Inputs (float32 from ``randn`` or ``rand + 0.5``, some int64 in [-8, 8]) of
rank 1-4, sizes from ``SIZES`` (1 included), now and then one from
``LARGE_SIZES`` or a 0-size dim; most contiguous, some permuted in memory or
sliced (``[..., ::2]``). Then statements drawn from:

* element-wise unary: exp, tanh, sigmoid, relu, neg, abs, and sqrt / rsqrt /
  log on positive values (a value not known to be positive is guarded:
  ``torch.log(v * v + 1.0)``, ``torch.sqrt(torch.sigmoid(v) + 0.5)``);
  neg / abs / relu on int64 too;
* binary with broadcasting: add (and ``alpha=``), sub, mul, div (denominator
  positive by construction), maximum, where (condition on exactly computed
  values, see below); against an earlier value or a new input whose shape
  broadcasts either way; int64 and mixed int64 / float32 where torch allows;
* scalar ops: ``v * 2.5``, ``v + 1``, ``1.0 - v``, ...;
* reductions: sum / mean / amax over random dims (negative ones too), keepdim
  or not, or over everything;
* softmax / log_softmax (mostly the last dim) and layer_norm over the last
  dim (with or without weight and bias);
* layout: reshape, view, flatten, unflatten, transpose, t, permute,
  unsqueeze, squeeze, expand, slicing, contiguous;
* matmul (1-d, 2-d, batched with broadcasting, either side) and bmm;
* in-place ``add_`` / ``mul_`` / ``sub_`` / ``div_`` / ``relu_`` on
  intermediates or inputs, also through views (every alias sees the write).

Every candidate statement is run on CPU while the program is built; one that
raises, gives a non-finite value, a magnitude over ``MAX_MAGNITUDE`` or more
than ``MAX_NUMEL`` elements is dropped and another drawn, so every program is
legal in eager mode and numerically tame. The program's outputs are the
values nothing consumed, inputs that an in-place statement wrote to, and
now and then an intermediate.

Each program runs for two *instances*: its own input sizes, and the same
program text with every input size that the text does not name (no size 1 or
0, no literal of the text) multiplied by 1-3 (consistently: equal sizes stay
equal), so the compiled executor also sees a known structure at new sizes
(the symbolic cache's revalidation path). An instance that eager mode
rejects (rare: a flattened size no longer matches) is skipped.

Tolerances
----------

Compared values must have equal shapes and dtypes (and, where the layout is
known to agree, strides); integer results must be equal; float results must
satisfy, element by element (NaN equal to NaN)::

    |a - b| <= atol * scale + rtol * |b| + ROUNDING_FACTOR * |eager - eager64|

``scale`` is ``max(1, largest magnitude among the values the output depends
on)``, measured in the eager run; ``eager64`` is the same program run in
float64 on the same inputs, so the last term is the output's own float32
rounding error (large where the program cancels or is ill-conditioned, about
0 elsewhere). ``(rtol, atol)`` comes from the loosest op class on the way to
the output:

=============  ======  ======  ==============================================
class          rtol    atol    why
=============  ======  ======  ==============================================
element-wise   1e-5    1e-6    generated kernels compute in f32; exp / tanh /
                               sigmoid / rsqrt come from other math code
                               than ATen's (a few ulp)
reduction      1e-4    1e-5    sums, softmax and layer_norm of inputs that
                               differ by a few ulp; summation order
matmul         1e-4    1e-5    as reductions (GEMM accumulation order)
=============  ======  ======  ==============================================

Conditions of ``where`` compare only *exact* values (inputs, layout ops,
neg / abs / relu / maximum / where / amax of exact values, int64 values):
values that both executors compute bit for bit, so that a difference of an
ulp cannot flip a branch.

Known backend bugs and divergences from eager are listed in ``KNOWN_BUGS``,
each with its minimal repro; the generator avoids them (grep for the entry's
name), so that the test stays green.

The package, by part: ``config`` (constants, ``KNOWN_BUGS``), ``program``
(``Program``, inputs, running), ``builder`` (the generator's core),
``elementwise`` / ``reductions`` / ``layout`` / ``matmul`` / ``inplace`` (the
op families), ``generator`` (``generate``), ``runner`` (running, comparing,
``run_graphs``) and ``cli`` (``main``).
"""

# The public names of the single-module version, importable from the package
# as before (``random_graphs.generate``, ``random_graphs.KNOWN_BUGS``, ...).
from .config import (CLASS_NAMES, ELEMENTWISE, FLOAT32, INT64, KNOWN_BUGS, LARGE_SIZES, MATMUL, MAX_INPUTS,
                     MAX_INT, MAX_MAGNITUDE, MAX_NUMEL, MAX_OPS, MIN_OPS, REDUCTION, ROUNDING_FACTOR, SIZES,
                     TOLERANCES)
from .program import IllConditioned, InputSpec, Program, make_input
from .generator import generate
from .runner import Eager, Failure, compare, run_disc, run_eager, run_graphs, tolerance
from .cli import main

__all__ = [
    "CLASS_NAMES", "ELEMENTWISE", "FLOAT32", "INT64", "KNOWN_BUGS", "LARGE_SIZES", "MATMUL", "MAX_INPUTS",
    "MAX_INT", "MAX_MAGNITUDE", "MAX_NUMEL", "MAX_OPS", "MIN_OPS", "REDUCTION", "ROUNDING_FACTOR", "SIZES",
    "TOLERANCES", "IllConditioned", "InputSpec", "Program", "make_input", "generate", "Eager", "Failure",
    "compare", "run_disc", "run_eager", "run_graphs", "tolerance", "main",
]
