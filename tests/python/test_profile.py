"""DISC_PROFILE=1: the compiled executor files each step's time under a label
that names the kernel or op, and torch_disc.metrics.profile() prints them."""
import torch

import torch_disc


def test_each_step_is_timed_under_its_label(counters):
    # Setting it clears the compile cache: graphs compiled from now on are profiled.
    with torch_disc.options.override(DISC_PROFILE=True):
        x = torch.randn(33, 17).to("disc")
        w = torch.randn(17, 5).to("disc")
        for _ in range(3):
            y = (torch.relu(x * 2 + 1) @ w).softmax(-1)
            y.cpu()
    c = counters()
    labels = {k[len("profile."):-len(".calls")]: v for k, v in c.items()
              if k.startswith("profile.") and k.endswith(".calls")}
    assert labels["fused.loop_kernel"] == 3  # x * 2 + 1 -> relu, once per run
    assert labels["library.aten::mm"] == 3
    assert labels["fused.row_kernel"] == 3  # softmax
    assert all(c[f"profile.{label}_ns"] > 0 for label in labels)
    table = torch_disc.metrics.profile()
    assert "library.aten::mm" in table and "us/call" in table.splitlines()[0]


def test_off_by_default_nothing_is_filed(counters):
    assert torch_disc.options.get("DISC_PROFILE") is False
    torch_disc._C.clear_compile_cache()
    (torch.randn(8, 8).to("disc") * 3 + 1).cpu()
    assert not any(k.startswith("profile.") for k in counters())
    assert torch_disc.metrics.profile().startswith("no profile")
