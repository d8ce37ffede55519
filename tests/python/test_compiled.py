"""The compile-once front end (torch_disc/frontend/compiled.py, lazy_backend/frontend/graph_template.h):
an ATen graph from torch.compile is traced on disc once, then run at every
size from its template with no tracing; what cannot be is traced per call,
counted."""
import pytest
import torch
import transformers

import torch_disc


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Dynamo reuses a graph it compiled for another module of the same code
    (parameters are inputs): each test counts its own templates."""
    torch._dynamo.reset()


def compiled_counts(c):
    return {k[len("compiled."):]: v for k, v in c().items() if k.startswith("compiled.")}


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)).eval()


def test_one_trace_and_one_compile_serve_every_batch_size(counters):
    torch_disc._C.clear_compile_cache()
    model = mlp()
    compiled = torch.compile(model, backend="disc", dynamic=True)
    with torch.no_grad():
        for batch in (8, 5, 13, 8, 64, 3):
            x = torch.randn(batch, 20)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    c = counters()
    # Traced at the first call and once more to check the template at a
    # new batch size; the other four calls trace nothing.
    assert compiled_counts(counters) == {"templates": 1, "checked": 1, "template_calls": 6}
    assert c["cache_misses"] == 1 and c["graphs_run"] == 6 and c["syncs"] == 0
    traced_once = c["ops_traced"] // 2
    with torch.no_grad():
        compiled(torch.randn(30, 20))
    assert counters()["ops_traced"] == 2 * traced_once


def tiny_bert(dropout=0.0):
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=128, num_labels=3,
                                     hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return transformers.BertForSequenceClassification(config)


def batch(b, length, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 100, (b, length), generator=g)
    mask = torch.ones(b, length, dtype=torch.long)
    mask[0, length // 2:] = 0
    return ids, mask


def test_bert_inference_at_every_length_from_one_compile(counters):
    torch_disc._C.clear_compile_cache()
    model = tiny_bert().eval()
    compiled = torch.compile(model, backend="disc", dynamic=True)
    with torch.no_grad():
        for length in (16, 24, 40, 16, 77):
            ids, mask = batch(4, length, length)
            want = model(input_ids=ids, attention_mask=mask).logits
            got = compiled(input_ids=ids, attention_mask=mask).logits
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    c = counters()
    assert compiled_counts(counters) == {"templates": 1, "checked": 1, "template_calls": 5}
    assert c["cache_misses"] == 1 and c.get("fallbacks", 0) == 0 and c["syncs"] == 0


def test_bert_training_with_dropout_runs_from_templates(counters):
    """Forward and backward graphs of AOTAutograd each run from a template;
    dropout draws new masks at each call from the disc generator, so two
    runs from one seed agree and the losses follow eager's (no dropout)."""
    def train(compile_it, dropout, seed=0):
        model = tiny_bert(dropout).train()
        step_fn = torch.compile(model, backend="disc", dynamic=True) if compile_it else model
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(seed)
        losses = []
        for k, length in enumerate((16, 24, 16, 40, 24)):
            ids, mask = batch(4, length, k)
            labels = torch.tensor([0, 1, 2, 1])
            loss = step_fn(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses

    torch.testing.assert_close(train(True, 0.0), train(False, 0.0), rtol=1e-4, atol=1e-5)
    torch_disc.metrics.reset()
    first, again = train(True, 0.1), train(True, 0.1)
    assert first == again
    n = compiled_counts(counters)
    assert n["templates"] == 4 and n.get("traced_calls", 0) == 0 and n.get("mismatches", 0) == 0
    assert n["template_calls"] == 20  # 2 runs x 5 steps x (forward + backward)


def test_size_the_fx_graph_does_not_predict_is_caught(counters):
    """x.shape[0] used as a number reaches the trace as a constant scalar
    tensor: the template cannot know it changes with the batch size. The
    check at the first new size finds that, and calls are traced after."""
    def f(x):
        return x.sum(0) / x.shape[0]

    compiled = torch.compile(f, backend="disc", dynamic=True)
    with pytest.warns(UserWarning, match="differs from its template"):
        for b in (8, 5, 13):
            x = torch.randn(b, 4)
            torch.testing.assert_close(compiled(x), f(x))
    n = compiled_counts(counters)
    assert n["untemplated.mismatch"] == 1 and n["traced_calls"] == 2


def test_graph_with_a_cpu_fallback_is_traced_per_call(counters):
    def f(x):
        return torch.nonzero(x > 0).float().sum() + x.sum()

    compiled = torch.compile(f, backend="disc")
    for seed in (0, 1):
        x = torch.randn(6, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(compiled(x), f(x))


def conv_bn():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    for m in model.modules():  # statistics and affine parameters other than the defaults
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.eval()


def test_freeze_folds_batch_norm_into_the_convolution(counters):
    model = conv_bn()
    frozen = torch_disc.compile(model, freeze=True, dynamic=True)
    with torch.no_grad():
        for b in (2, 5, 3):
            x = torch.randn(b, 3, 12, 12)
            torch.testing.assert_close(frozen(x), model(x), rtol=1e-4, atol=1e-5)
    c = counters()
    assert c["freeze.batch_norms_folded"] == 2 and c["freeze.ops_folded"] >= 1  # the Linear's transpose
    assert compiled_counts(counters)["template_calls"] == 3
    # Frozen: later changes to the parameters are not seen.
    with torch.no_grad():
        x = torch.randn(2, 3, 12, 12)
        before = frozen(x)
        model[0].weight.add_(1.0)
        torch.testing.assert_close(frozen(x), before)


def test_batch_norm_in_inference_runs_from_a_template(counters):
    """BatchNorm in inference is recorded whole, writing nothing: unfrozen,
    its statistics are inputs of one template at every batch size."""
    model = conv_bn()
    compiled = torch.compile(model, backend="disc", dynamic=True)
    with torch.no_grad():
        for b in (2, 5, 3):
            x = torch.randn(b, 3, 12, 12)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert compiled_counts(counters) == {"templates": 1, "checked": 1, "template_calls": 3}


def test_graph_breaks_give_one_template_per_graph(counters):
    def f(x):
        y = torch.relu(x) * 2
        torch._dynamo.graph_break()
        return y.sum(1) + x.mean()

    compiled = torch.compile(f, backend="disc", dynamic=True)
    for b in (4, 6, 9):
        x = torch.randn(b, 5)
        torch.testing.assert_close(compiled(x), f(x))
    n = compiled_counts(counters)
    assert n["templates"] == 2 and n["template_calls"] == 6 and n.get("traced_calls", 0) == 0


def test_graph_disc_cannot_trace_runs_eagerly_warned(counters, monkeypatch):
    from torch_disc.frontend import compiled as _compiled

    def refuse_relu(self, target, args, kwargs):
        if target is torch.ops.aten.relu.default:
            raise NotImplementedError("no relu today")
        return original(self, target, args, kwargs)

    original = _compiled._Recorder.call_function
    monkeypatch.setattr(_compiled._Recorder, "call_function", refuse_relu)
    model = mlp().append(torch.nn.ReLU())
    compiled = torch.compile(model, backend="disc")
    x = torch.randn(4, 20)
    with torch.no_grad(), pytest.warns(UserWarning, match="runs on the CPU as it is: NotImplementedError"):
        torch.testing.assert_close(compiled(x), model(x))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
    n = compiled_counts(counters)
    assert n["eager_calls"] == 2 and n["untemplated.translation_failed"] == 1


def test_threads_share_one_compiled_model(counters):
    """Calls from two threads, some tracing and checking while the other
    runs from the template: every result is eager's."""
    import threading
    model = mlp()
    compiled = torch.compile(model, backend="disc", dynamic=True)
    errors = []

    def serve(seed):
        try:
            with torch.no_grad():
                for k in range(12):
                    x = torch.randn(2 + (seed * 7 + k * 3) % 30, 20)
                    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with torch.no_grad():
        compiled(torch.randn(5, 20))  # Dynamo compiles on one thread
    threads = [threading.Thread(target=serve, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert compiled_counts(counters)["templates"] == 1, compiled_counts(counters)


def test_a_compile_names_the_line_that_called_the_model():
    torch_disc._C.clear_compile_cache()
    torch_disc._C.clear_compile_log()
    compiled = torch.compile(mlp(), backend="disc", dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(6, 20))
    (record,) = torch_disc.compile_log()
    assert "test_compiled.py" in record["location"]


def pre_activation():
    """BatchNorm -> ReLU -> convolution (DenseNet's order): no convolution
    before the BatchNorm to fold it into."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.Flatten()).eval()


def test_frozen_statistics_are_not_written_by_a_trace(counters):
    """Frozen BatchNorm statistics stay data: a trace that wrote them would
    chain the next trace onto its graph (the check then failed, and every
    call traced)."""
    model = pre_activation()
    frozen = torch_disc.compile(model, freeze=True, dynamic=True)
    with torch.no_grad():
        for b in (2, 3, 5, 4):
            x = torch.randn(b, 3, 8, 8)
            torch.testing.assert_close(frozen(x), model(x), rtol=1e-5, atol=1e-5)
    n = compiled_counts(counters)
    assert n == {"templates": 1, "checked": 1, "template_calls": 4}, n


def test_batch_norm_in_inference_leaves_its_statistics_alone():
    bn = torch.nn.BatchNorm2d(3).eval().to("disc")
    bn(torch.randn(2, 3, 4, 4).to("disc")).cpu()
    assert not torch_disc._C.is_pending(bn.running_mean) and not torch_disc._C.is_pending(bn.running_var)


def test_automatic_dynamic_shapes_compile_once(counters):
    """Without dynamic=True Dynamo compiles the first size statically and
    recompiles with symbolic sizes at the second (unless what it saw of
    earlier code made it dynamic at once): one or two graphs, each from a
    template, and one disc compile (same structure and size pattern)."""
    class Net(torch.nn.Module):  # code of its own: Dynamo has seen no size of it
        def __init__(self):
            super().__init__()
            self.body = mlp()

        def forward(self, x):
            return self.body(x)

    torch_disc._C.clear_compile_cache()
    model = Net()
    compiled = torch.compile(model, backend="disc")
    with torch.no_grad():
        for batch in (8, 5, 13, 21, 6):
            x = torch.randn(batch, 20)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    n = compiled_counts(counters)
    assert n["templates"] in (1, 2) and n["template_calls"] == 5 and n.get("traced_calls", 0) == 0, n
    assert counters()["cache_misses"] == 1


def test_aot_failure_runs_the_graph_eagerly(counters, monkeypatch):
    import torch._dynamo.backends.common as common

    def failing(**kwargs):
        def compile_graph(gm, example_inputs):
            raise RuntimeError("AOT says no")
        return compile_graph

    monkeypatch.setattr(common, "aot_autograd", failing)
    model = mlp()
    compiled = torch.compile(model, backend="disc")
    x = torch.randn(4, 20)
    with torch.no_grad(), pytest.warns(UserWarning, match="AOTAutograd failed .* AOT says no"):
        torch.testing.assert_close(compiled(x), model(x))
    assert counters()["compiled.aot_failures"] == 1


def test_dynamo_restarts_pass_through_the_backend(counters):
    """AOTAutograd asks Dynamo to analyse a frame again by raising (a float
    scalar made a tensor): that is no failure, and BERT compiles on disc."""
    model = tiny_bert().eval()
    compiled = torch.compile(model, backend="disc", dynamic=True)
    ids, mask = batch(2, 12, 0)
    with torch.no_grad():
        compiled(input_ids=ids, attention_mask=mask)
    c = counters()
    assert c.get("compiled.aot_failures", 0) == 0 and c["compiled.templates"] == 1
