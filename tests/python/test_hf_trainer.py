"""Hugging Face Trainer and accelerate, unmodified, on disc: Trainer, given
no device arguments, trains on disc (torch.accelerator's device) and its
losses equal CPU Trainer's (dropout off), with evaluation, gradient
accumulation, gradient checkpointing, bf16 and a saved checkpoint; and
accelerate.Accelerator prepares a model and optimizer on disc."""
import os

import pytest
import torch
import torch_disc

transformers = pytest.importorskip("transformers")
accelerate = pytest.importorskip("accelerate")

from accelerate.state import AcceleratorState, PartialState  # noqa: E402


class Glosses(torch.utils.data.Dataset):
    """Random token ids and labels, the same for every run."""

    def __init__(self, n, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 50, (n, 12), generator=g)
        self.labels = torch.randint(0, 3, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def tiny_bert():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config)


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    """accelerate keeps one process-wide state: each run sets up its own."""
    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)


def train(tmp_path, cpu, **kwargs):
    """A Trainer run; returns the trainer and its training losses. The CPU
    run says so twice: accelerate lets ACCELERATE_TORCH_DEVICE (which
    torch_disc sets to disc) win over use_cpu."""
    if cpu:
        os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
    try:
        return train_here(tmp_path, cpu, **kwargs)
    finally:
        os.environ["ACCELERATE_TORCH_DEVICE"] = "disc"


def train_here(tmp_path, cpu, **kwargs):
    args = dict(output_dir=str(tmp_path / ("cpu" if cpu else "disc")), per_device_train_batch_size=8,
                per_device_eval_batch_size=8, num_train_epochs=1, logging_steps=1, report_to=[],
                save_strategy="no", seed=0, use_cpu=cpu, disable_tqdm=True)
    args.update(kwargs)
    trainer = transformers.Trainer(model=tiny_bert(), args=transformers.TrainingArguments(**args),
                                   train_dataset=Glosses(32), eval_dataset=Glosses(16, seed=1))
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, losses


def same_run(tmp_path, rel=1e-4, **kwargs):
    cpu_trainer, cpu_losses = train(tmp_path, cpu=True, **kwargs)
    AcceleratorState._reset_state(True)
    disc_trainer, disc_losses = train(tmp_path, cpu=False, **kwargs)
    assert disc_trainer.args.device.type == "disc"
    assert next(disc_trainer.model.parameters()).device.type == "disc"
    assert len(disc_losses) == len(cpu_losses) > 0
    assert disc_losses == pytest.approx(cpu_losses, rel=rel)
    return cpu_trainer, disc_trainer


def test_trainer_picks_disc_and_trains_as_on_the_cpu(tmp_path):
    assert PartialState().device.type == "disc"
    torch_disc.metrics.reset()
    same_run(tmp_path)
    assert torch_disc.metrics.counters().get("fallbacks", 0) == 0


def test_trainer_evaluates_and_accumulates_gradients(tmp_path):
    cpu_trainer, disc_trainer = same_run(tmp_path, gradient_accumulation_steps=2,
                                         eval_strategy="steps", eval_steps=1)
    cpu_eval = [h["eval_loss"] for h in cpu_trainer.state.log_history if "eval_loss" in h]
    disc_eval = [h["eval_loss"] for h in disc_trainer.state.log_history if "eval_loss" in h]
    assert len(disc_eval) == 2  # 4 batches, 2 per optimizer step, evaluated after each
    assert disc_eval == pytest.approx(cpu_eval, rel=1e-4)


def test_trainer_with_gradient_checkpointing(tmp_path):
    same_run(tmp_path, activation_checkpointing=True,
             activation_checkpointing_kwargs={"use_reentrant": False})


def test_trainer_in_bf16(tmp_path, monkeypatch):
    """transformers 5.24 accepts bf16=True only on accelerators it knows by
    name (its is_torch_bf16_gpu_available); the same autocast comes through
    accelerate's own setting, which Trainer passes on."""
    with pytest.raises(ValueError, match="doesn't support bf16"):
        transformers.TrainingArguments(output_dir=str(tmp_path), bf16=True, report_to=[])
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    # bf16 autocast rounds differently per kernel: both runs move alike.
    _, disc_trainer = same_run(tmp_path, rel=2e-2)
    assert disc_trainer.accelerator.mixed_precision == "bf16"
    assert torch.disc.is_bf16_supported()


def test_trainer_saves_a_checkpoint_that_loads_back(tmp_path):
    straight, losses = train(tmp_path, cpu=False, num_train_epochs=2, save_strategy="steps",
                             save_steps=4)
    checkpoint = tmp_path / "disc" / "checkpoint-4"
    assert (checkpoint / "model.safetensors").exists() and (checkpoint / "optimizer.pt").exists()
    final = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "disc" / "checkpoint-8")
    for (name, a), b in zip(straight.model.state_dict().items(), final.to("disc").state_dict().values()):
        assert torch.equal(a.cpu(), b.cpu()), name
    # Resumed halfway, the run reads model, optimizer, scheduler and RNG
    # state back onto disc and ends as the straight run did.
    AcceleratorState._reset_state(True)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "resumed"), per_device_train_batch_size=8, num_train_epochs=2,
        report_to=[], save_strategy="no", seed=0, disable_tqdm=True, logging_steps=1)
    resumed = transformers.Trainer(model=tiny_bert(), args=args, train_dataset=Glosses(32))
    resumed.train(resume_from_checkpoint=str(checkpoint))
    after = [h["loss"] for h in resumed.state.log_history if "loss" in h]
    assert len(after) == len(losses) == 8  # the checkpoint's 4 logged steps, then 4 more
    assert after[4:] == pytest.approx(losses[4:], rel=1e-5)


def test_accelerator_prepares_a_model_and_optimizer_on_disc():
    acc = accelerate.Accelerator()
    assert acc.device.type == "disc"
    model = tiny_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, opt = acc.prepare(model, opt)
    assert next(model.parameters()).device.type == "disc"
    data = Glosses(8)
    batch = {"input_ids": data.ids.to(acc.device), "labels": data.labels.to(acc.device)}
    loss = model(**batch).loss
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    acc.clear()  # frees accelerate's references; calls the device's empty_cache
    assert torch.isfinite(loss.detach().cpu())


def test_torch_disc_sets_accelerates_device_variable_unless_the_user_did():
    assert os.environ.get("ACCELERATE_TORCH_DEVICE") == "disc"


def test_the_bert_examples_trainer_script_matches_the_cpu(monkeypatch):
    """examples/bert/trainer.py on the packaged MiniLM, two steps."""
    from examples.bert import finetune, trainer

    if finetune.packaged_model_dir() is None:
        pytest.skip("no packaged MiniLM checkpoint (scripts/setup.sh installs it)")
    argv = ["--limit", "16", "--max-steps", "2", "--dropout-off"]
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "disc")  # the cpu run changes it
    on_disc = trainer.main(argv)
    AcceleratorState._reset_state(True)
    on_cpu = trainer.main(argv + ["--device", "cpu"])
    assert on_disc["device"] == "disc" and on_cpu["device"] == "cpu"
    assert on_disc["train_loss"] == pytest.approx(on_cpu["train_loss"], rel=1e-4)
    assert on_disc["eval_loss"] == pytest.approx(on_cpu["eval_loss"], rel=1e-4)
