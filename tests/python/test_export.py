"""torch_disc.export / torch_disc.load: one file, reloaded in a fresh process
without the model's code, run on disc at every size the specs allow; bad
inputs and bad files are clear errors."""
import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch
from torch.export import Dim

import torch_disc
from torch_disc.frontend.export import FORMAT

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
    with pytest.raises(ValueError, match=f"has format 99, this torch_disc reads format {FORMAT}"):
        torch_disc.load(str(other))


SERVE_WITHOUT = """
import sys, torch
if sys.argv[3] == "blocked":
    sys.modules["transformers"] = None  # any import of it now fails
import torch_disc
served = torch_disc.load(sys.argv[1])
ids, want = torch.load(sys.argv[2])
out = served(ids)
torch.testing.assert_close(out["last_hidden_state"], want["last_hidden_state"], rtol=1e-4, atol=1e-4)
torch.testing.assert_close(out["pooler_output"], want["pooler_output"], rtol=1e-4, atol=1e-4)
print(type(out).__module__ + "." + type(out).__name__, sorted(out.keys()),
      "transformers" in sys.modules and sys.modules["transformers"] is not None)
"""


def test_a_transformers_model_loads_where_transformers_does_not_import(tmp_path):
    # BertModel returns a ModelOutput: the archive must not need transformers
    # to deserialize. Where it imports, the output is that type again.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=64)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, 12))
    path = str(tmp_path / "bert.disc")
    torch_disc.export(model, (ids,), path)
    with torch.no_grad():
        want = model(ids)
    torch.save((ids, {k: want[k] for k in ("last_hidden_state", "pooler_output")}), tmp_path / "ref.pt")
    runs = {}
    for mode in ("blocked", "importable"):
        r = subprocess.run([sys.executable, "-c", SERVE_WITHOUT, path, str(tmp_path / "ref.pt"), mode],
                           capture_output=True, text=True, cwd=str(tmp_path), timeout=300,
                           env={**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        assert r.returncode == 0, r.stderr
        runs[mode] = r.stdout.split()
    fields = "['last_hidden_state', 'pooler_output']"
    assert " ".join(runs["blocked"]) == f"builtins.dict {fields} False"
    assert " ".join(runs["importable"]) == (
        f"transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions {fields} True")


def test_an_output_type_without_string_keys_is_refused_at_export(tmp_path):
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    torch.utils._pytree.register_pytree_node(
        Pair, lambda p: ([p.a, p.b], None), lambda xs, _: Pair(*xs))
    try:
        class Model(torch.nn.Module):
            def forward(self, x):
                return Pair(x + 1, x * 2)

        with pytest.raises(TypeError, match=r"returns a .*Pair, which is not a tuple, list"):
            torch_disc.export(Model(), (torch.randn(3),), str(tmp_path / "pair.disc"))
    finally:
        torch.utils._pytree._deregister_pytree_node(Pair)
