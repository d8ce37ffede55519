"""Imports torch_disc from another build's package directory (such as
scripts/build_minimal.sh's) in a process of its own, before torch_disc is
imported."""
import sys


def use_package_dir(path):
    # The editable install's import hook (scikit-build-core) sends
    # `torch_disc` to the source tree's extension before sys.path is
    # consulted: drop it, so that the package in `path` is the one imported.
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, path)
