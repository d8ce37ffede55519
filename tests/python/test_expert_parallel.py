"""Expert parallelism on disc: all_to_all_single with uneven split sizes
recorded into the step's graph, split sizes that do not fit failing every
rank with an error naming both sides, and a mixture-of-experts layer whose
experts live on different ranks training like one process holding them
all (on the CPU). Ranks are processes (dist_expert_cases.py) over Gloo on 127.0.0.1."""
import functools

import pytest
import torch

import torch_disc
from tests.python import dist_cases, dist_expert_cases
from tests.python.test_distributed import close, ok

pytestmark = pytest.mark.skipif(not torch_disc.distributed.register(),
                                reason="torch without distributed / Gloo support")

launch = functools.partial(dist_cases.launch, module=dist_expert_cases.MODULE)


@pytest.mark.parametrize("world", [2, 3])
def test_uneven_all_to_all_moves_every_row_and_is_recorded(world):
    for rank, result in enumerate(ok(launch("uneven_all_to_all", world))):
        for name, r in result.items():
            assert r["equal"], f"rank {rank}, {name}: wrong rows"
            assert r["recorded"] and r["syncs_before_read"] == 0, f"rank {rank}, {name}: {r}"


def test_split_sizes_that_do_not_fit_fail_every_rank_naming_both():
    results = launch("split_mismatch", 2, {"timeout": 30}, timeout=90)
    for rank, (status, message) in enumerate(results):
        assert status == "error", f"rank {rank}: {status}: {message}"
        assert "split sizes disagree: rank 0 sends rank 1 2 rows" in message, message
        assert "rank 1 expects 1" in message, message


def test_expert_parallel_moe_trains_like_one_process():
    steps, lr, world = 4, 0.02, 2
    results = ok(launch("expert_parallel_train", world, {"steps": steps, "lr": lr}))
    want_losses, want_w1, want_router = dist_expert_cases.one_process_train(steps, lr, world)
    for rank, r in enumerate(results):
        assert r["fallbacks"] == {}, f"rank {rank}"
        # Two host reads a step: the split sizes, and the loss; the
        # all_to_alls of the forward and backward are in the graphs.
        assert r["later_syncs"] == 2 * (steps - 2), f"rank {rank}"
        close(r["losses"], want_losses, rel=1e-5)
        torch.testing.assert_close(torch.tensor(r["router"]), want_router, rtol=1e-5, atol=1e-6)
        for e, w in r["w1"].items():
            torch.testing.assert_close(torch.tensor(w), want_w1[int(e)], rtol=1e-5, atol=1e-6)
    held = [sorted(int(e) for e in r["w1"]) for r in results]
    assert held == [[0, 1], [2, 3]]
