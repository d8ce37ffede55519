"""Writes torch_disc's dist-info (name, version, entry points, read from
pyproject.toml) into a folder on PYTHONPATH, so a Python that finds the
package there, not through pip (the emulated aarch64 one), also autoloads it
at `import torch` and finds the torch.compile backend.

    python3 scripts/aarch64_dist_info.py pyproject.toml SITE_DIR
"""
import sys
import tomllib
from pathlib import Path


def main(pyproject, site):
    project = tomllib.loads(Path(pyproject).read_text())["project"]
    info = Path(site) / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items()) + "\n"
        for group, points in project.get("entry-points", {}).items()))


if __name__ == "__main__":
    main(*sys.argv[1:])
