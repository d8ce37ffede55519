"""The ``torch.backends`` entry point. ``import torch`` loads it, which
imports this package (and so registers the device) before torch's import
returns: a script with ``device="disc"`` needs no ``import torch_disc``.
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns it off.

When ``import torch_disc`` comes first, torch's import runs this while the
package is half-initialized; the package then finishes the registration.
"""


def load() -> None:
    """Nothing left to do: importing the package registered the device."""
