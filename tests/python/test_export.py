"""torch_disc.export / torch_disc.load: one file, reloaded in a fresh process
without the model's code, run on disc at every size the specs allow; bad
inputs and bad files are clear errors."""
import json
import subprocess
import sys
import zipfile

import pytest
import torch
from torch.export import Dim

import torch_disc

SERVE = """
import sys, torch, torch_disc
served = torch_disc.load(sys.argv[1])
inputs, want = torch.load(sys.argv[2])
for x, w in zip(inputs, want):
    torch.testing.assert_close(served(x), w, rtol=1e-5, atol=1e-5)
c = torch_disc.metrics.counters()
print(c["compiled.templates"], c["compiled.template_calls"], c.get("compiled.traced_calls", 0),
      c.get("freeze.batch_norms_folded", 0))
"""


def cnn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("export") / "cnn.disc")
    model = cnn()
    torch_disc.export(model, (torch.randn(2, 3, 16, 16),), path,
                      dynamic_shapes=({0: Dim("batch", min=1, max=64)},))
    return path, model


def test_reloaded_in_a_fresh_process_matches_eager_at_every_batch(exported, tmp_path):
    path, model = exported
    inputs = [torch.randn(b, 3, 16, 16) for b in (2, 5, 3, 8)]
    with torch.no_grad():
        torch.save((inputs, [model(x) for x in inputs]), tmp_path / "ref.pt")
    # No model code in the serving process: only the file.
    r = subprocess.run([sys.executable, "-c", SERVE, path, str(tmp_path / "ref.pt")],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    templates, template_calls, traced, folded = map(int, r.stdout.split())
    assert (templates, template_calls, traced, folded) == (1, 4, 0, 1)


def test_inputs_outside_the_specs_are_rejected_naming_input_and_dim(exported):
    path, _ = exported
    served = torch_disc.load(path)
    assert served.inputs[0]["dims"][0]["max"] == 64 and served.inputs[0]["dims"][1:] == [3, 16, 16]
    with pytest.raises(ValueError, match=r"input input \(args\[0\]\) dim 0 is 65, outside the exported range 1..64"):
        served(torch.randn(65, 3, 16, 16))
    with pytest.raises(ValueError, match=r"input input \(args\[0\]\) dim 2 must be 16, got 17"):
        served(torch.randn(2, 3, 17, 16))
    with pytest.raises(TypeError, match=r"must be torch.float32, got torch.float64"):
        served(torch.randn(2, 3, 16, 16, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"must have 4 dims, got 3"):
        served(torch.randn(3, 16, 16))


def test_damaged_foreign_and_other_version_files_are_clear_errors(exported, tmp_path):
    path, _ = exported
    data = open(path, "rb").read()
    damaged = tmp_path / "damaged.disc"
    damaged.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="damaged or not an exported model"):
        torch_disc.load(str(damaged))
    foreign = tmp_path / "foreign.zip"
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("a.txt", "hello")
    with pytest.raises(ValueError, match="was not written by torch_disc.export"):
        torch_disc.load(str(foreign))
    with pytest.raises(FileNotFoundError, match="no file"):
        torch_disc.load(str(tmp_path / "missing.disc"))
    # The same archive with the record of another format.
    other = tmp_path / "other.disc"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(other, "w") as dst:
        for item in src.infolist():
            body = src.read(item.filename)
            if item.filename.endswith("torch_disc.json"):
                body = json.dumps(dict(json.loads(body), format=99)).encode()
            dst.writestr(item, body)
    with pytest.raises(ValueError, match="has format 99, this torch_disc reads format 1"):
        torch_disc.load(str(other))
