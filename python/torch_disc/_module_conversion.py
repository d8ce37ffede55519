"""``module.to("disc")`` keeps one Parameter object per parameter, as
``.to("cuda")`` does, so tied weights (GPT-2's ``lm_head`` and ``wte``) stay
tied and optimizers built before the move keep working.

``Module._apply`` keeps a parameter's object only when the old and new
tensors have compatible shallow-copy types (CPU and CUDA do; CPU and a
PrivateUse1 device do not, and ``param.data = new`` refuses them) or when it
swaps tensors (``torch.__future__.set_swap_module_params_on_conversion``).
Otherwise every module gets a new Parameter of its own: a weight shared by
two modules comes apart and its gradient is split between the copies. So a
conversion to, from or on disc swaps. A parameter that something else
still references (a view of it, an autograd graph that read it) cannot be
swapped; then the conversion makes new Parameters as before, with a warning
when that unties weights.

Either way ``Module._apply`` would turn a lazy module's uninitialized
parameters and buffers (``nn.LazyConv2d``) into plain empty tensors, which
its first forward then feeds to the op instead of initializing them (CPU and
CUDA keep them through ``param.data = new``). They come back uninitialized,
on the new device and dtype.
"""
import functools
import warnings

import torch

_WRAPPED = "_disc_swaps_params"


def _has_disc_tensors(module: torch.nn.Module) -> bool:
    return any(t.device.type == "disc" for t in module.parameters()) or any(
        t.device.type == "disc" for t in module.buffers())


def _has_tied_parameters(module: torch.nn.Module) -> bool:
    params = [p for _, p in module.named_parameters(remove_duplicate=False)]
    return len({id(p) for p in params}) < len(params)


def _targets_disc(args, kwargs) -> bool:
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:  # noqa: BLE001 - Module.to reports bad arguments itself
        return False
    return device is not None and torch.device(device).type == "disc"


def _uninitialized(module):
    """(table, name, class) of every uninitialized parameter and buffer."""
    return [(table, name, type(t)) for m in module.modules()
            for table in (m._parameters, m._buffers)
            for name, t in table.items() if torch.nn.parameter.is_lazy(t)]


def _keep_uninitialized(module, convert):
    """Runs ``convert()``; what was uninitialized before stays so."""
    lazy = _uninitialized(module)
    result = convert()
    for table, name, cls in lazy:
        t = table[name]
        if t is not None and not torch.nn.parameter.is_lazy(t):
            table[name] = cls(requires_grad=t.requires_grad, device=t.device, dtype=t.dtype)
    return result


def _converted_with_swaps(module, convert):
    """Runs ``convert()`` (a Module conversion) with parameter swapping on."""
    if torch.__future__.get_swap_module_params_on_conversion():
        return _keep_uninitialized(module, convert)
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        return _keep_uninitialized(module, convert)
    except RuntimeError as e:
        if "Couldn't swap" not in str(e):
            raise
        if _has_tied_parameters(module):
            warnings.warn(
                f"disc: {e} ({e.__cause__}); the conversion makes new Parameter objects instead, "
                "as for any device without swapping: the weights shared between modules come apart "
                "and optimizers built before the conversion hold the old tensors. Convert the model "
                "before taking views of its parameters or running it with autograd.", stacklevel=3)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    return _keep_uninitialized(module, convert)


def _wrap(name, involves_disc):
    original = getattr(torch.nn.Module, name)
    if getattr(original, _WRAPPED, False):
        return

    @functools.wraps(original)
    def wrapper(self, *args, **kwargs):
        if not involves_disc(self, args, kwargs):
            return original(self, *args, **kwargs)
        return _converted_with_swaps(self, lambda: original(self, *args, **kwargs))

    setattr(wrapper, _WRAPPED, True)
    setattr(torch.nn.Module, name, wrapper)


def install() -> None:
    _wrap("to", lambda m, a, k: _targets_disc(a, k) or _has_disc_tensors(m))
    _wrap("disc", lambda m, a, k: True)
    _wrap("cpu", lambda m, a, k: _has_disc_tensors(m))
