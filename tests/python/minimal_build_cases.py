"""Run by test_build_components.py in a subprocess: torch_disc from the build
without the CPU code generator and oneDNN (scripts/build_minimal.sh), whose
package directory is argv[1]. Prints one JSON line of what it measured."""
import json
import os
import sys

from other_build import use_package_dir  # beside this file

use_package_dir(sys.argv[1])

import torch  # noqa: E402
import torch_disc  # noqa: E402
from mlp_losses import mlp_losses  # noqa: E402  (beside this file)


def library_only_graphs():
    """Graphs with no fused kernel, only library calls: they run on the
    compiled executor, their GEMMs and convolution on ATen. Returns the
    largest difference from CPU."""
    torch.manual_seed(2)
    a, w1, w2 = torch.randn(8, 16), torch.randn(16, 4), torch.randn(16, 5)
    img, k = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    d = [t.to("disc") for t in (a, w1, w2, img, k)]
    got = [d[0] @ d[1], d[0] @ d[2], torch.nn.functional.conv2d(d[3], d[4])]  # one lhs: a merged GEMM
    torch_disc.sync()  # one graph
    want = [a @ w1, a @ w2, torch.nn.functional.conv2d(img, k)]
    return max((g.cpu() - w).abs().max().item() for g, w in zip(got, want))


components = torch_disc.build_components()
torch_disc.metrics.reset()
disc = mlp_losses("disc")
cpu = mlp_losses("cpu")
after_mlp = dict(torch_disc.metrics.counters())
report = torch_disc.metrics.report()
torch_disc.metrics.reset()
library_error = library_only_graphs()
print(json.dumps({
    "extension": torch_disc._C.__file__,
    "components": components,
    "disc": disc,
    "cpu": cpu,
    "mlp": after_mlp,
    "library_error": library_error,
    "library": dict(torch_disc.metrics.counters()),
    "report": report,
}))
sys.stdout.flush()
os._exit(0)
