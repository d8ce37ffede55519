"""The models and data of the distributed tests, shared by the ranks
(dist_cases.py) and by the one-process references (test_distributed.py):
every batch and start is seeded, so both see the same."""


# Models: the MNIST MLP with an unused layer (find_unused_parameters), and a
# tiny BERT from a config (no dropout: ranks and the reference draw apart).

def build_model(kind, seed):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    if kind == "mlp":
        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(),
                                          nn.Linear(64, 10))
                self.unused = nn.Linear(10, 10)

            def forward(self, x):
                return self.body(x)
        return MLP()
    if kind == "resnet":
        # torchvision's ResNet-18 (BatchNorm buffers DDP broadcasts every
        # forward, 62 parameters), with SiLU for ReLU as in test_model_zoo:
        # a float32 ReLU mask flips on rounding, so runs part after a few
        # steps whatever the device.
        import torchvision

        model = torchvision.models.resnet18(num_classes=10)
        for module in list(model.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, nn.ReLU):
                    setattr(module, name, nn.SiLU())
        return model
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertForSequenceClassification(config)


def batches(kind, steps, global_batch, seed=0):
    """The global batches, identical everywhere: (inputs, labels) per step."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        if kind in ("mlp", "resnet"):
            image = (1, 28, 28) if kind == "mlp" else (3, 32, 32)
            out.append((torch.randn(global_batch, *image, generator=g),
                        torch.randint(0, 10, (global_batch,), generator=g)))
        else:
            ids = torch.randint(1, 120, (global_batch, 12), generator=g)
            mask = torch.ones_like(ids)
            mask[::2, 9:] = 0  # padded rows
            out.append(((ids, mask), torch.randint(0, 3, (global_batch,), generator=g)))
    return out


def shard(x, rank, world):
    if isinstance(x, tuple):
        return tuple(shard(t, rank, world) for t in x)
    per = x.shape[0] // world
    return x[rank * per:(rank + 1) * per]


def loss_of(model, kind, x, y, device, dtype=None):
    import torch.nn.functional as F

    if kind in ("mlp", "resnet"):
        return F.cross_entropy(model(x.to(device, dtype)), y.to(device))
    ids, mask = x
    return model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=y.to(device)).loss


def optimizer(kind, params):
    import torch

    if kind in ("mlp", "resnet"):
        return torch.optim.SGD(params, lr=0.05 if kind == "mlp" else 0.01, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-3)


def train(model, kind, data, device, accumulate=1, no_sync=None, dtype=None):
    """Per-step losses; with ``accumulate`` micro-batches per step, the first
    ones backward under ``no_sync`` (DDP) or plainly (one process)."""
    import contextlib

    opt = optimizer(kind, model.parameters())
    losses = []
    for i in range(0, len(data), accumulate):
        micro = data[i:i + accumulate]
        for k, (x, y) in enumerate(micro):
            last = k == len(micro) - 1
            with contextlib.nullcontext() if last or no_sync is None else no_sync():
                loss = loss_of(model, kind, x, y, device, dtype)
                loss.backward()
            losses.append(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses


def tp_model():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Linear(64, 10))


def mse_losses(model, opt, pairs, device):
    """Per-step MSE losses of ``opt`` over the (x, y) ``pairs``."""
    import torch

    losses = []
    for x, y in pairs:
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def tp_losses(model, opt, device, steps):
    import torch

    g = torch.Generator().manual_seed(1)
    pairs = ((torch.randn(16, 24, generator=g), torch.randn(16, 10, generator=g))
             for _ in range(steps))
    return mse_losses(model, opt, pairs, device)


def sp_model():
    """A one-block pre-norm transformer (4 heads, width 32) between an input
    and an output projection, for tensor and sequence parallelism: every
    submodule a plan can name, and attention whose head count follows the
    (local) width of q."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, width, head_dim):
            super().__init__()
            self.head_dim = head_dim
            self.q, self.k, self.v, self.o = (nn.Linear(width, width) for _ in range(4))

        def forward(self, x):
            b, s, _ = x.shape

            def heads(t):
                return t.view(b, s, -1, self.head_dim).transpose(1, 2)

            out = nn.functional.scaled_dot_product_attention(
                heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True)
            return self.o(out.transpose(1, 2).reshape(b, s, -1))

    class Block(nn.Module):
        def __init__(self, width=32):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = Attention(width, head_dim=8)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                     nn.Linear(4 * width, width))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp, self.block = nn.Linear(12, 32), Block()
            self.norm, self.head = nn.LayerNorm(32), nn.Linear(32, 6)

        def forward(self, x):
            return self.head(self.norm(self.block(self.inp(x))))

    torch.manual_seed(0)
    return Model()


def sp_batches(steps, seed=2):
    """(inputs, targets) per step: 4 sequences of 8 positions."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 8, 12, generator=g), torch.randn(4, 8, 6, generator=g))
            for _ in range(steps)]


def sp_losses(model, device, steps):
    """Per-step MSE losses of AdamW on sp_batches."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return mse_losses(model, opt, sp_batches(steps), device)
