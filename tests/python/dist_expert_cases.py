"""What each rank runs in test_expert_parallel.py: all_to_all with uneven
split sizes, and a mixture-of-experts layer whose experts live on different
ranks (expert parallelism), with the tokens routed to them and back by
all_to_all. Started by :func:`tests.python.dist_cases.launch` with
``module=MODULE``; the process group and the result file are
dist_cases.main's.
"""
import sys

from tests.python import dist_cases

MODULE = "tests.python.dist_expert_cases"
HIDDEN, EXPERTS, TOKENS = 8, 4, 12


def rows_for(src, dst):
    """How many rows rank ``src`` sends rank ``dst``: uneven, some none."""
    return (src + 2 * dst + 1) % 4


def block(src, dst, n, dtype):
    """The rows ``src`` sends ``dst``: values that say whose they are."""
    import torch

    base = torch.arange(n * 3, dtype=torch.float64).reshape(n, 3)
    return (base + 1000 * src + 100 * dst).to(dtype)


def _uneven_all_to_all(rank, world, args):
    """all_to_all_single with uneven splits on disc tensors, twice with
    other splits: the results against the rows every rank sent (exact),
    and the counters around the second call."""
    import torch
    import torch.distributed as dist

    import torch_disc

    results = {}
    for dtype_name in ("float32", "int64"):
        dtype = getattr(torch, dtype_name)
        for shift in (0, 1):
            sends = [rows_for(rank + shift, d) for d in range(world)]
            receives = [rows_for(s + shift, rank) for s in range(world)]
            x = torch.cat([block(rank, d, n, dtype) for d, n in enumerate(sends)])
            want = torch.cat([block(s, rank, n, dtype) for s, n in enumerate(receives)])
            torch_disc.sync()
            before = torch_disc.metrics.counters()
            out = torch.empty(sum(receives), 3, dtype=dtype, device="disc")
            dist.all_to_all_single(out, x.to("disc"), receives, sends)
            recorded = "disc::all_to_all(" in torch_disc.graph_text(out)
            syncs = torch_disc.metrics.counters().get("syncs", 0) - before.get("syncs", 0)
            got = out.cpu()
            results[f"{dtype_name}/{shift}"] = {"equal": torch.equal(got, want), "recorded": recorded,
                                               "syncs_before_read": syncs}
    return results


def _split_mismatch(rank, world, args):
    """Rank 0 sends rank 1 one row more than rank 1 expects."""
    import torch
    import torch.distributed as dist

    sends = [1] * world
    receives = [1] * world
    if rank == 0:
        sends[1] = 2
    x = torch.ones(sum(sends), 3).to("disc")
    out = torch.empty(sum(receives), 3, device="disc")
    dist.all_to_all_single(out, x, receives, sends)
    return out.cpu().tolist()


class MoE:
    """A top-1 mixture of ``EXPERTS`` two-layer experts and a router, built
    from one seed; ``experts`` picks which experts this copy holds."""

    def __init__(self, device, experts):
        import torch

        g = torch.Generator().manual_seed(0)
        self.router = (torch.randn(HIDDEN, EXPERTS, generator=g) * 0.3).to(device).requires_grad_()
        w1 = torch.randn(EXPERTS, HIDDEN, 2 * HIDDEN, generator=g) * 0.3
        w2 = torch.randn(EXPERTS, 2 * HIDDEN, HIDDEN, generator=g) * 0.3
        self.w1 = {e: w1[e].to(device).requires_grad_() for e in experts}
        self.w2 = {e: w2[e].to(device).requires_grad_() for e in experts}

    def params(self):
        return [self.router, *self.w1.values(), *self.w2.values()]

    def expert(self, e, x):
        return (x @ self.w1[e]).relu() @ self.w2[e]

    def route(self, x):
        """(expert of each token, its gate): softmax probability of the top one."""
        probs = (x @ self.router).softmax(-1)
        gate, expert = probs.max(-1)
        return expert, gate


def tokens(step, rank):
    import torch

    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(TOKENS, HIDDEN, generator=g), torch.randn(TOKENS, HIDDEN, generator=g)


def moe_loss_one_process(model, x, target):
    import torch

    expert, gate = model.route(x)
    out = torch.zeros_like(x)
    for e in range(EXPERTS):
        rows = (expert == e).nonzero().squeeze(1)
        out = out.index_add(0, rows, model.expert(e, x[rows]))
    return ((out * gate.unsqueeze(1) - target) ** 2).sum()


def moe_loss_expert_parallel(model, x, target, rank, world):
    """This rank's tokens to the ranks holding their experts and back:
    expert e lives on rank e // (EXPERTS // world). The split sizes are the
    token counts, read on the host, as expert-parallel code does."""
    import torch
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single

    local = EXPERTS // world
    expert, gate = model.route(x)
    order = expert.argsort(stable=True)
    counts = torch.histc(expert, bins=EXPERTS, min=0, max=EXPERTS - 1).long()
    # received[s * local + e]: rows rank s sends for this rank's expert e.
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
    counts, received = counts.view(world, local), received.view(world, local)
    # One host read for both split lists (and the per-expert counts).
    sends, receives = torch.stack([counts.sum(1), received.sum(1)]).tolist()
    received = received.cpu()
    rows = all_to_all_single(torch.empty(sum(receives), HIDDEN, device=x.device), x[order],
                             receives, sends)
    pieces, start = [], 0
    for n in received.tolist():
        for e, k in enumerate(n):
            pieces.append(model.expert(rank * local + e, rows[start:start + k]))
            start += k
    back = all_to_all_single(torch.empty(len(order), HIDDEN, device=x.device), torch.cat(pieces),
                             sends, receives)
    out = torch.empty_like(back).index_copy(0, order, back)
    return ((out * gate.unsqueeze(1) - target) ** 2).sum()


def _expert_parallel_train(rank, world, args):
    """SGD steps of the MoE with each rank holding EXPERTS / world experts
    and its own tokens: the global loss of each step, this rank's expert
    weights at the end, CPU fallbacks, and the syncs of the steps after the
    first two. The router is replicated: its gradient is all-reduced."""
    import torch
    import torch.distributed as dist

    import torch_disc

    local = EXPERTS // world
    model = MoE("disc", range(rank * local, (rank + 1) * local))
    losses = []
    before = torch_disc.metrics.counters()
    for step in range(args["steps"]):
        x, target = (t.to("disc") for t in tokens(step, rank))
        loss = moe_loss_expert_parallel(model, x, target, rank, world)
        loss.backward()
        dist.all_reduce(model.router.grad)
        total = loss.detach().clone()
        dist.all_reduce(total)
        with torch.no_grad():
            for p in model.params():
                p -= args["lr"] * p.grad
                p.grad = None
        losses.append(total.item())
        if step == 1:
            warm = torch_disc.metrics.counters()
    weights = {e: model.w1[e].detach().cpu().tolist() for e in model.w1}
    after = torch_disc.metrics.counters()
    fallbacks = {k: v - before.get(k, 0) for k, v in after.items()
                 if k.startswith("fallback") and v != before.get(k, 0)}
    return {"losses": losses, "w1": weights, "router": model.router.detach().cpu().tolist(),
            "fallbacks": fallbacks,
            "later_syncs": after["syncs"] - warm["syncs"]}


def one_process_train(steps, lr, world):
    """The same steps with every expert and every rank's tokens in one
    process, on the CPU."""
    import torch

    model = MoE("cpu", range(EXPERTS))
    losses = []
    for step in range(steps):
        batch = [tokens(step, r) for r in range(world)]
        x = torch.cat([b[0] for b in batch])
        target = torch.cat([b[1] for b in batch])
        loss = moe_loss_one_process(model, x, target)
        loss.backward()
        with torch.no_grad():
            for p in model.params():
                p -= lr * p.grad
                p.grad = None
        losses.append(loss.item())
    return losses, {e: model.w1[e].detach().cpu() for e in model.w1}, model.router.detach().cpu()


CASES = {"uneven_all_to_all": _uneven_all_to_all, "split_mismatch": _split_mismatch,
         "expert_parallel_train": _expert_parallel_train}

if __name__ == "__main__":
    dist_cases.main(sys.argv[1:], CASES, failing=("split_mismatch",))
