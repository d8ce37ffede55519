"""Per-step losses of a small MLP trained on random data, the same run on
any device: for the checks that run in a process of their own
(minimal_build_cases.py, cuda_target_cases.py)."""
import torch


def mlp_losses(device, hidden=64, batch=32, dropout=0.0, optimizer=torch.optim.Adam, steps=5):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(784, hidden), torch.nn.ReLU()]
    if dropout:
        layers.append(torch.nn.Dropout(dropout))
    model = torch.nn.Sequential(*layers, torch.nn.Linear(hidden, 10)).to(device)
    opt = optimizer(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 784, generator=gen).to(device)
        y = torch.randint(0, 10, (batch,), generator=gen).to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
