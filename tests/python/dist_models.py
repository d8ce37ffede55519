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


def tp_losses(model, opt, device, steps):
    import torch

    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 24, generator=g), torch.randn(16, 10, generator=g)
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
