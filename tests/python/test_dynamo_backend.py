"""torch.compile(backend="disc"): Dynamo's graph runs on disc, CPU in and
out, forward and backward, one disc compile per structure across sizes."""
import torch

import torch_disc


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))


def test_cpu_module_trains_through_disc_like_eager(counters):
    torch_disc._C.clear_compile_cache()
    eager, compiled_model = mlp(), mlp()
    compiled = torch.compile(compiled_model, backend="disc", dynamic=True)
    for batch in (8, 5, 13):
        x = torch.randn(batch, 20, generator=torch.Generator().manual_seed(batch))
        want, got = eager(x), compiled(x)
        assert got.device.type == "cpu"
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        want.square().mean().backward()
        got.square().mean().backward()
    for a, b in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6)
    c = counters()
    assert c["graphs_run"] >= 6 and c.get("fallbacks", 0) == 0
    # Forward and backward compile once each; new batch sizes reuse them.
    assert c["compiles"] == 2


def test_disc_inputs_stay_on_disc():
    model = mlp().to("disc")
    compiled = torch.compile(model, backend="disc")
    x = torch.randn(4, 20)
    got = compiled(x.to("disc"))
    assert got.device.type == "disc"
    torch.testing.assert_close(got.cpu(), mlp()(x), rtol=1e-5, atol=1e-6)
