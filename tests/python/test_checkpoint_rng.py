"""Activation checkpointing replays the forward's random draws on disc:
torch.utils.checkpoint saves and restores the device's RNG state (it looks
for ``torch.disc._initialized`` first), so a recomputed dropout draws the
forward's mask and the gradients equal the unchecked run's, bit for bit."""
import pytest
import torch
import torch.nn.functional as F
import torch_disc
from torch.utils.checkpoint import checkpoint


class Noisy(torch.nn.Module):
    """Linear -> a random op -> Linear: every random op disc traces."""

    def __init__(self, noise):
        super().__init__()
        self.a, self.b, self.noise = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4), noise

    def forward(self, x):
        h = self.a(x)
        if self.noise == "dropout":
            h = F.dropout(h, 0.5, training=True)
        elif self.noise == "rrelu":
            h = F.rrelu(h, training=True)
        elif self.noise == "bernoulli_":
            h = h * torch.empty_like(h).bernoulli_(0.5)
        elif self.noise == "randn_like":
            h = h + torch.randn_like(h)
        return self.b(h)


def grads(noise, ckpt, reentrant=False, device="disc"):
    torch.manual_seed(0)
    model = Noisy(noise).to(device)
    x = torch.randn(4, 8).to(device).requires_grad_()
    torch.manual_seed(1)  # the forward's draws
    y = checkpoint(model, x, use_reentrant=reentrant) if ckpt else model(x)
    y.square().sum().backward()
    return [t.cpu() for t in (x.grad, model.a.weight.grad, model.b.weight.grad)]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
@pytest.mark.parametrize("noise", ["dropout", "rrelu", "bernoulli_", "randn_like"])
def test_recomputed_forward_draws_the_forwards_randomness(noise, reentrant):
    plain = grads(noise, ckpt=False)
    for a, b in zip(plain, grads(noise, ckpt=True, reentrant=reentrant)):
        assert torch.equal(a, b)


def test_the_draws_are_random_at_all():
    """Guards the test above: a seed that did not reach the op would make
    every run equal too."""
    torch.manual_seed(1)
    x = torch.ones(64, device="disc")
    first = F.dropout(x, 0.5).cpu()
    assert not torch.equal(first, F.dropout(x, 0.5).cpu())
    torch.manual_seed(1)
    assert torch.equal(first, F.dropout(x, 0.5).cpu())


def test_fork_rng_restores_disc_state():
    torch.manual_seed(3)
    x = torch.ones(64, device="disc")
    with torch.random.fork_rng(device_type="disc"):
        inside = F.dropout(x, 0.5).cpu()
    assert torch.equal(inside, F.dropout(x, 0.5).cpu())


def test_checkpointing_through_the_disc_dynamo_backend():
    """A checkpointed block inside torch.compile(backend="disc"): Dynamo
    keeps the forward's mask for backward; gradients as without it."""
    def run(ckpt):
        torch.manual_seed(0)
        model = Noisy("dropout").to("disc")
        fn = (lambda x: checkpoint(model, x, use_reentrant=False)) if ckpt else model
        compiled = torch.compile(fn, backend="disc", dynamic=False)
        x = torch.randn(4, 8).to("disc").requires_grad_()
        torch.manual_seed(1)
        compiled(x).square().sum().backward()
        return x.grad.cpu(), model.a.weight.grad.cpu()

    torch._dynamo.reset()
    for a, b in zip(run(False), run(True)):
        assert torch.equal(a, b)


def test_hf_bert_with_gradient_checkpointing_trains_as_without_it():
    transformers = pytest.importorskip("transformers")

    def losses(checkpointing):
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=32, num_labels=3,
            hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
        model = transformers.BertForSequenceClassification(config).to("disc")
        if checkpointing:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        out = []
        torch.manual_seed(1)
        for _ in range(3):
            ids = torch.randint(1, 50, (4, 12), generator=g).to("disc")
            labels = torch.randint(0, 3, (4,), generator=g).to("disc")
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            out.append(loss.item())
        return out, model.bert.embeddings.word_embeddings.weight.cpu()

    plain, w_plain = losses(False)
    ckpt, w_ckpt = losses(True)
    # The recomputation is another graph, fused otherwise: equal masks leave
    # rounding-level differences, where another mask would move the loss.
    assert ckpt == pytest.approx(plain, rel=1e-6)
    torch.testing.assert_close(w_ckpt, w_plain, rtol=1e-5, atol=1e-6)
    assert torch_disc.metrics.counters().get("fallbacks", 0) == 0
