"""Every ``DISC_*`` option, read and set in-process.

Each option is declared once in the backend (``runtime/options.def``) with
its type, default and a line of documentation; ``docs/env_vars.md`` explains
each at length. A value comes from the environment when the option is first
read and from :func:`set` after that. Booleans take ``0/1/false/true/off/on``;
anything else raises ``ValueError`` naming the variable::

    >>> import torch_disc
    >>> torch_disc.options.get("DISC_GEMM_MERGE")
    True
    >>> torch_disc.options.set("DISC_GEMM_MERGE", False)  # new graphs compile without it
    >>> with torch_disc.options.override(DISC_EXECUTOR="reference"):
    ...     y = (torch.ones(3, device="disc") * 2).cpu()

Setting an option that decides how graphs compile (``effect == "compile"``)
clears the compile cache, so that the next graphs compile under it.
"""
import contextlib

from . import _C

__all__ = ["get", "set", "reset", "describe", "override"]


def get(name: str):
    """The current value of option ``name``: a bool, an int or a str."""
    return _C.get_option(name)


def set(name: str, value) -> None:  # noqa: A001 - the module's verb
    """Sets option ``name`` for this process (``ValueError`` if ``value`` is
    not one it takes)."""
    _C.set_option(name, value)


def reset(name: str) -> None:
    """Option ``name`` back to its environment value, or its default."""
    _C.reset_option(name)


def describe() -> list:
    """One dict per option: ``name``, ``type`` (bool, int, choice, text),
    ``default``, ``choices``, ``effect`` (process, compile, run, test),
    ``doc`` and the current ``value``."""
    return _C.options()


@contextlib.contextmanager
def override(**values):
    """Sets options for the ``with`` block and restores them after."""
    before = {name: get(name) for name in values}
    try:
        for name, value in values.items():
            set(name, value)
        yield
    finally:
        for name, value in before.items():
            set(name, value)
