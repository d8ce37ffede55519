"""module.to("disc") keeps one Parameter object per parameter, as .to("cuda")
does: tied weights stay tied, optimizers built before the move keep working
(python/torch_disc/_module_conversion.py)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def tied_pair():
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    b.weight = a.weight
    return nn.ModuleList([a, b])


@pytest.mark.parametrize("move", [lambda m: m.to("disc"), lambda m: m.disc(),
                                  lambda m: m.to(device="disc", dtype=torch.float32)])
def test_tied_parameters_stay_tied_there_and_back(move):
    m = tied_pair()
    w = m[0].weight
    m = move(m)
    assert m[0].weight is m[1].weight is w and w.device.type == "disc"
    m = m.cpu()
    assert m[0].weight is m[1].weight is w and w.device.type == "cpu"
    m.to("disc").to("cpu")
    assert m[0].weight is m[1].weight is w
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_an_optimizer_built_before_the_move_updates_the_moved_parameters():
    torch.manual_seed(0)
    cpu = nn.Linear(8, 3)
    disc = nn.Linear(8, 3)
    disc.load_state_dict(cpu.state_dict())
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_disc = torch.optim.SGD(disc.parameters(), lr=0.1)
    disc.to("disc")
    x = torch.randn(5, 8)
    for model, opt, dev in [(cpu, opt_cpu, "cpu"), (disc, opt_disc, "disc")]:
        model(x.to(dev)).square().mean().backward()
        opt.step()
    torch.testing.assert_close(disc.weight.cpu(), cpu.weight, rtol=1e-6, atol=1e-6)


class TinyLM(nn.Module):
    """GPT-2's weight tying: the output head is the token embedding."""

    def __init__(self, vocab=11, dim=6):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.mix(self.wte(ids))))


def test_a_tied_embedding_gets_both_gradients_and_trains_like_cpu():
    torch.manual_seed(0)
    cpu = TinyLM()
    disc = TinyLM()
    disc.load_state_dict(cpu.state_dict())
    disc.to("disc")
    assert disc.lm_head.weight is disc.wte.weight
    opts = [torch.optim.Adam(m.parameters(), lr=0.05) for m in (cpu, disc)]
    ids = torch.randint(0, 11, (3, 5))
    for _ in range(3):
        losses = []
        for model, opt, dev in [(cpu, opts[0], "cpu"), (disc, opts[1], "disc")]:
            opt.zero_grad()
            logits = model(ids.to(dev))
            loss = F.cross_entropy(logits.reshape(-1, 11), ids.to(dev).reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    torch.testing.assert_close(disc.wte.weight.cpu(), cpu.wte.weight, rtol=1e-5, atol=1e-5)


def test_a_parameter_viewed_elsewhere_is_converted_with_a_warning():
    m = tied_pair()
    view = m[0].weight.view(16)  # holds the parameter: it cannot be swapped
    with pytest.warns(UserWarning, match="new Parameter objects"):
        m.to("disc")
    assert m[0].weight.device.type == "disc" and m[1].weight.device.type == "disc"
    torch.testing.assert_close(m[0].weight.cpu().view(16), view)
    assert not torch.__future__.get_swap_module_params_on_conversion()


def test_conversions_without_disc_are_untouched():
    m = tied_pair()
    w = m[0].weight
    m.to(torch.float64)  # CPU to CPU: PyTorch's own path (.data =), no swap
    assert m[0].weight is w and w.dtype == torch.float64


def test_a_model_run_on_cpu_first_still_moves_without_a_warning(recwarn):
    # A CPU reference computed first keeps its autograd graph, which holds
    # the weight: no swap is possible, and with nothing tied the usual new
    # Parameters are right.
    torch.manual_seed(0)
    m = nn.Linear(4, 3)
    x = torch.randn(2, 4)
    want = m(x)
    m.to("disc")
    assert m.weight.device.type == "disc"
    torch.testing.assert_close(m(x.to("disc")).cpu(), want.detach())
    assert not [w for w in recwarn.list if "disc:" in str(w.message)]
