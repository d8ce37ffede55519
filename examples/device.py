"""Device selection shared by the examples."""
import torch


def device_and_sync(name):
    """Return ``(torch.device, sync_fn)``; torch_disc is imported only for disc."""
    if name == "disc":
        import torch_disc  # registers the "disc" device

        return torch.device("disc"), torch_disc.sync
    return torch.device(name), lambda: None
