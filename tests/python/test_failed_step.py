"""A training step whose graph fails at run time -- an index out of range that
only the data shows -- ends as in eager: it raises, once, and leaves every
tensor it would have written as it was (parameters, optimizer state,
BatchNorm statistics), so the following steps train as if it had not run. A
failure in one thread's step is no error of another thread's, whose model
trains on. When a run fails after it had updated an input in place (running
out of memory in the update), what it wrote is not passed off as the old
value: those tensors hold the error.
"""
import inspect
import threading

import pytest
import torch
import torch.nn as nn

import torch_disc

GOOD = torch.tensor([[1, 2], [3, 4], [5, 6]])
BAD = torch.tensor([[1, 42], [3, 4], [5, 6]])  # 42: out of the embedding's 10 rows


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Embedding(10, 8), nn.Flatten(), nn.Linear(16, 4), nn.BatchNorm1d(4),
                         nn.Linear(4, 1))


def optimizer(m):
    return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)


def step(m, opt, ids, device, read_loss=True):
    opt.zero_grad()
    loss = m(ids.to(device)).square().mean()
    loss.backward()
    opt.step()
    return loss.item() if read_loss else None


def cpu_run(bad_steps, steps, seed=0):
    """The same training on CPU eager, where a bad step raises before it
    changes anything; None for the steps that raised."""
    m = model(seed)
    opt = optimizer(m)
    losses = []
    for i in range(steps):
        try:
            losses.append(step(m, opt, BAD if i in bad_steps else GOOD, "cpu"))
        except IndexError:
            losses.append(None)
    return losses, m, opt


def state_of(m, opt):
    """Every tensor of the model and of its optimizer's state, on the CPU."""
    tensors = {f"model.{k}": v for k, v in m.state_dict().items()}
    for i, p in enumerate(m.parameters()):
        for k, v in opt.state[p].items():
            if torch.is_tensor(v):
                tensors[f"opt.{i}.{k}"] = v
    return {k: v.detach().cpu() for k, v in tensors.items()}


def assert_same_state(disc_state, cpu_state):
    assert disc_state.keys() == cpu_state.keys()
    for k in cpu_state:
        torch.testing.assert_close(disc_state[k], cpu_state[k], rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")


@pytest.fixture(params=[True, False], ids=["async", "sync"])
def async_mode(request):
    with torch_disc.options.override(DISC_ASYNC=request.param):
        yield request.param


@pytest.mark.parametrize("bad_step", [1, 3])
def test_a_bad_batch_raises_once_and_the_model_trains_on_as_in_eager(bad_step, async_mode, counters):
    steps = 6
    expected, cpu_model, cpu_opt = cpu_run({bad_step}, steps)
    m = model().to("disc")
    opt = optimizer(m)
    losses = []
    for i in range(steps):
        try:
            losses.append(step(m, opt, BAD if i == bad_step else GOOD, "disc"))
        except IndexError as e:
            assert "index out of range" in str(e)
            losses.append(None)
    assert [l is None for l in losses] == [l is None for l in expected]
    assert [l or 0.0 for l in losses] == pytest.approx([l or 0.0 for l in expected], rel=1e-5)
    assert_same_state(state_of(m, opt), state_of(cpu_model, cpu_opt))
    torch_disc.wait()  # raised once: nothing is owed any more
    c = counters()
    assert c["failed_syncs"] == 1
    # 7 parameters, their 7 momentum buffers and BatchNorm's 3 statistics
    # got their old values back; the loss and the 7 gradients, which the
    # failed step created, hold its error.
    assert c["failures.restored_buffers"] == 17
    assert c["failures.failed_buffers"] == 8
    assert c.get("fallbacks", 0) == 0


def test_an_unread_failure_is_raised_by_a_later_sync_once(async_mode):
    # The bad step's own sync raises, or, when its graph still runs then, a
    # sync of a later step (the second sync that hands a graph over, at the
    # latest): what the thread traced between the failure and the raise is
    # dropped too, so the steps up to the one that raised changed nothing,
    # as a step that raises in eager.
    m = model().to("disc")
    opt = optimizer(m)
    raised = []
    for i, ids in enumerate((GOOD, BAD, GOOD, GOOD, GOOD)):
        try:
            step(m, opt, ids, "disc", read_loss=False)
            torch_disc.sync()
        except IndexError:
            raised.append(i)
    torch_disc.wait()
    assert len(raised) == 1 and raised[0] in (1, 2, 3)
    if not async_mode:
        assert raised == [1]
    _, cpu_model, cpu_opt = cpu_run(set(range(1, raised[0] + 1)), 5)
    assert_same_state(state_of(m, opt), state_of(cpu_model, cpu_opt))


@pytest.mark.parametrize("executor_name", ["compiled", "reference"])
def test_the_error_names_the_op_and_the_users_line_that_traced_it(async_mode, executor_name,
                                                                  executor):
    executor(executor_name)
    emb = nn.Embedding(10, 4).to("disc")
    line = inspect.currentframe().f_lineno + 1
    loss = emb(BAD.to("disc")).sum()  # raised later, from the graph
    with pytest.raises(IndexError, match="index out of range") as info:
        loss.item()
    message = str(info.value)
    assert "aten::index_select" in message  # what nn.Embedding records
    assert f"test_failed_step.py:{line} (test_the_error_names_the_op" in message


def test_a_read_of_a_good_tensor_does_not_raise_an_unrelated_failure(async_mode):
    x = torch.randn(5).to("disc")
    bad = x.index_select(0, torch.tensor([0, 7]).to("disc"))
    good = x * 2
    torch.testing.assert_close(good.cpu(), x.cpu() * 2)
    with pytest.raises(IndexError):
        bad.cpu()  # its own failure: raised by its read, and no longer owed
    torch_disc.sync()
    torch_disc.wait()


def test_a_failure_in_one_threads_step_leaves_another_threads_model_alone(async_mode):
    bad_steps = {1, 4, 7}
    steps = 9
    results = {}

    def train(name, bad, m, opt):
        errors = 0
        for i in range(steps):
            try:
                step(m, opt, BAD if bad and i in bad_steps else GOOD, "disc")
            except IndexError:
                errors += 1
        results[name] = (errors, state_of(m, opt))

    models = [model(seed=1).to("disc"), model(seed=2).to("disc")]  # the seed is global
    threads = [threading.Thread(target=train, args=(name, bad, m, optimizer(m)))
               for name, bad, m in (("a", True, models[0]), ("b", False, models[1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"][0] == len(bad_steps)
    assert results["b"][0] == 0
    _, cpu_a, opt_a = cpu_run(bad_steps, steps, seed=1)
    _, cpu_b, opt_b = cpu_run(set(), steps, seed=2)
    assert_same_state(results["a"][1], state_of(cpu_a, opt_a))
    assert_same_state(results["b"][1], state_of(cpu_b, opt_b))


def test_a_run_that_fails_after_updating_an_input_leaves_the_error_not_half_an_update(counters):
    lin = nn.Linear(64, 64).to("disc")
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    step_loss = lambda: lin(torch.ones(8, 64, device="disc")).square().mean()  # noqa: E731
    step_loss().backward()
    opt.step()
    torch_disc.wait()
    with torch_disc.options.override(DISC_INJECT_FAULT="update"):
        opt.zero_grad()
        step_loss().backward()
        with pytest.raises(RuntimeError, match="DISC_INJECT_FAULT=update"):
            opt.step()  # raises here when the graph runs on this thread
            torch_disc.wait()
    assert counters()["failed_syncs"] == 1
    with pytest.raises(RuntimeError, match="DISC_INJECT_FAULT=update"):
        lin.weight.cpu()
    with torch.no_grad():  # new values make the model usable again
        lin.weight.copy_(torch.zeros(64, 64))
        lin.bias.copy_(torch.zeros(64))
    assert lin(torch.ones(1, 64, device="disc")).abs().sum().item() == 0


def test_a_read_of_a_buffer_restored_after_a_failure_raises_it_once(async_mode, counters):
    # The read would otherwise pass the old value off as the updated one: it
    # raises the failure its thread still owes, and a second read sees the
    # restored value.
    w = torch.ones(3).to("disc")
    w.cpu()
    picked = torch.arange(5.0).to("disc").index_select(0, torch.tensor([0, 7]).to("disc"))
    w.add_(picked.sum())
    with pytest.raises(IndexError, match="index out of range"):
        w.cpu()
    assert w.cpu().tolist() == [1.0, 1.0, 1.0]
    assert counters()["failures.restored_buffers"] == 1
    torch_disc.sync()  # nothing is owed any more
    torch_disc.wait()
