"""Backward passes rooted at disc tensors run on the calling thread
(autograd/calling_thread.py), not on autograd's device worker thread."""
import threading

import pytest
import torch

import torch_disc  # noqa: F401


def backward_thread(device, call):
    x = torch.ones(4, device=device, requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(threading.get_ident()))
    call((x * 2).sum(), x)
    return seen[0], x


@pytest.mark.parametrize("call", [
    lambda y, x: y.backward(),
    lambda y, x: torch.autograd.backward([y]),
    lambda y, x: torch.autograd.backward(tensors=(t for t in [y])),
    lambda y, x: torch.autograd.grad(y, x),
    lambda y, x: torch.autograd.grad(outputs=[y], inputs=[x]),
], ids=["tensor.backward", "backward", "backward-generator", "grad", "grad-keywords"])
def test_disc_backward_runs_on_the_calling_thread(call):
    thread, x = backward_thread("disc", call)
    assert thread == threading.get_ident()
    assert torch._C._is_multithreading_enabled()  # restored after the call


def test_results_are_those_of_the_engine_threads():
    x = torch.randn(8, 3)
    w = torch.randn(3, 2, requires_grad=True)
    (x @ w).tanh().sum().backward()
    wd = w.detach().to("disc").requires_grad_()
    (x.to("disc") @ wd).tanh().sum().backward()
    torch.testing.assert_close(wd.grad.cpu(), w.grad)


def test_a_caller_that_turned_threads_off_keeps_it_off():
    with torch.autograd.set_multithreading_enabled(False):
        thread, _ = backward_thread("disc", lambda y, x: y.backward())
        assert not torch._C._is_multithreading_enabled()
    assert thread == threading.get_ident()


def test_cpu_backward_is_not_wrapped_differently():
    thread, x = backward_thread("cpu", lambda y, x: y.backward())
    assert thread == threading.get_ident() and x.grad.tolist() == [2.0] * 4
