"""Whole models nobody here wrote, trained on disc vs CPU eager: the model
sweep (``make model-sweep``; its quick subset runs in CI through
test_model_sweep.py).

Models: every architecture in transformers' auto mappings, per task head
(causal LM, masked LM, sequence classification, seq2seq LM, image
classification, CTC), built from its default config shrunk generically
(hidden sizes, layers, heads, vocabulary, image and patch sizes: ``shrink``,
then gentler shrinks where CPU eager cannot run the first); torchvision's
classification models at 64 pixels (their fixed sizes where they have one);
one model per timm family at 64 pixels, else its own size. Random weights,
no download; dropout, stochastic depth and routers' jitter off.

Per model: three AdamW steps with gradient clipping on CPU eager float32,
CPU float64 (where the model takes it) and disc, from the same weights and
batch. A model passes when no loss is NaN, disc's losses are as close to
float64's as eager float32's are (``FACTOR`` times, or within ``FLOOR`` of
eager's, relative), and the third step compiles nothing. Also recorded:
fallbacks by op, syncs per step, the third step's time on disc and in
eager (one step each: indicative, not a benchmark), or the error with the
op and line disc names. Models CPU eager cannot train at these settings
are listed apart, not counted.

    python tests/python/model_sweep.py --out results/model_sweep.md
    python tests/python/model_sweep.py --only bert,gpt2 --families hf
"""
import argparse
import contextlib
import copy
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
import warnings

import torch

import torch_disc
from torch_disc import metrics

STEPS = 3
FACTOR = 8.0
FLOOR = 1e-5
BATCH, LENGTH = 2, 16
TIMEOUT_S = 120
MAX_PARAMETERS = 100_000_000  # three runs of a larger model would not fit in memory
CASES_PER_PROCESS = 25
HF_TASKS = {  # auto mapping -> task
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": "causal-lm",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": "masked-lm",
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": "seq-cls",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES": "seq2seq-lm",
    "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES": "image-cls",
    "MODEL_FOR_CTC_MAPPING_NAMES": "ctc",
}
# Config attributes set to a small value wherever a config has them.
SMALL_INTS = {
    32: ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "embedding_size", "word_embed_proj_dim",
         "encoder_hidden_size", "projection_dim", "hidden_dim"),
    2: ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
        "num_decoder_layers", "num_encoder_layers", "num_key_value_heads", "decoder_num_layers"),
    4: ("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads",
        "decoder_attention_heads", "num_heads", "decoder_num_attention_heads"),
    64: ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
         "decoder_intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size"),
    8: ("d_kv", "head_dim", "patch_size", "kv_channels", "qk_rope_head_dim", "v_head_dim"),
    16: ("qk_nope_head_dim", "kv_lora_rank", "q_lora_rank"),
    256: ("vocab_size",),
    128: ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx"),
}
SMALL_IMAGE = 32


# What a retry leaves as the config has it when the shrink above gives a
# model CPU eager cannot run (an architecture that ties a size to another
# the generic names miss): first the per-head sizes, then every width.
GENTLER = (
    {"d_kv", "head_dim", "kv_channels", "qk_rope_head_dim", "v_head_dim", "qk_nope_head_dim",
     "kv_lora_rank", "q_lora_rank", "num_key_value_heads"},
    {name for value, names in SMALL_INTS.items() if value not in (2, 256, 128) for name in names},
)


def shrink(config, attempt=0):
    """The config made small, whatever the architecture calls its sizes;
    nested configs (text_config, vision_config, ...) too. ``attempt`` > 0:
    a gentler shrink (``GENTLER``)."""
    from transformers import PretrainedConfig
    keep = set().union(*GENTLER[:attempt])
    for v in list(vars(config).values()):
        if isinstance(v, PretrainedConfig):
            shrink(v, attempt)
    for value, names in SMALL_INTS.items():
        for name in names:
            if name in keep:
                continue
            if isinstance(getattr(config, name, None), int) and not isinstance(getattr(config, name), bool):
                setattr(config, name, value)
    for name in ("image_size",):
        if isinstance(getattr(config, name, None), int):
            setattr(config, name, SMALL_IMAGE)
    for name, v in list(vars(config).items()):
        # Random in training (dropout, routers' jitter): off, so that the
        # runs compare the same numbers.
        if isinstance(v, float) and any(k in name for k in ("dropout", "drop_path", "layerdrop", "jitter")):
            setattr(config, name, 0.0)
        if name in ("depths",) and isinstance(v, (list, tuple)):
            setattr(config, name, [1] * len(v))
        if name in ("hidden_sizes", "embed_dims", "dims") and isinstance(v, (list, tuple)):
            setattr(config, name, [16 * 2 ** i for i in range(len(v))])
        if name in ("num_heads", "num_attention_heads") and isinstance(v, (list, tuple)):
            setattr(config, name, [2 ** i for i in range(len(v))])
    for name, token in (("pad_token_id", 0), ("decoder_start_token_id", 0), ("bos_token_id", 1),
                        ("eos_token_id", 2)):
        value = getattr(config, name, None)
        if not isinstance(value, int) or value >= 256:
            setattr(config, name, token)
    config.num_labels = 3
    if hasattr(config, "use_cache"):
        config.use_cache = False
    return config


# ----------------------------------------------------------------------------
# What the sweep runs: (name, family, task, build, batch)


def no_dropout(model):
    """Dropout and stochastic depth off (torchvision and timm build them
    in): disc draws other random numbers than the CPU."""
    for m in model.modules():
        kind = type(m).__name__
        if "Dropout" in kind or "DropPath" in kind or "StochasticDepth" in kind or "DropBlock" in kind:
            for attr in ("p", "drop_prob"):
                if isinstance(getattr(m, attr, None), float):
                    setattr(m, attr, 0.0)
    return model


def check_size(model):
    size = sum(p.numel() for p in model.parameters())
    if size > MAX_PARAMETERS:
        raise ValueError(f"too large for the sweep: {size / 1e6:.0f}M parameters")


def token_batch(task, config, generator):
    vocab = getattr(config, "vocab_size", 256) or 256
    ids = torch.randint(3, vocab, (BATCH, LENGTH), generator=generator)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if task in ("causal-lm", "masked-lm"):
        batch["labels"] = ids.clone()
    elif task == "seq-cls":
        batch["labels"] = torch.tensor([0, 2])
    elif task == "seq2seq-lm":
        batch["labels"] = torch.randint(3, vocab, (BATCH, LENGTH // 2), generator=generator)
    return batch


def image_batch(config, generator, size=SMALL_IMAGE, channels=3):
    size = getattr(config, "image_size", size) if config is not None else size
    size = size if isinstance(size, int) else SMALL_IMAGE
    channels = getattr(config, "num_channels", channels) if config is not None else channels
    return {"pixel_values": torch.randn(BATCH, channels, size, size, generator=generator),
            "labels": torch.tensor([0, 2])}


def audio_batch(config, generator):
    vocab = getattr(config, "vocab_size", 32)
    return {"input_values": torch.randn(BATCH, 4000, generator=generator),
            "labels": torch.randint(1, vocab, (BATCH, 4), generator=generator)}


def hf_cases(only=None):
    import transformers
    from transformers.models.auto import configuration_auto, modeling_auto
    for mapping, task in HF_TASKS.items():
        for model_type, class_name in sorted(getattr(modeling_auto, mapping).items()):
            if only and model_type not in only:
                continue
            name = f"{model_type}/{task}"

            def build(attempt=0, model_type=model_type, class_name=class_name, task=task):
                config = shrink(configuration_auto.CONFIG_MAPPING[model_type](), attempt)
                cls = getattr(transformers, class_name)
                with torch.device("meta"):  # what a shrink missed, before it takes the memory
                    check_size(cls(config))
                model = cls(config)
                gen = torch.Generator().manual_seed(1)
                if task == "image-cls":
                    batch = image_batch(config, gen)
                elif task == "ctc":
                    batch = audio_batch(config, gen)
                else:
                    batch = token_batch(task, config, gen)
                return model, batch
            build.attempts = 1 + len(GENTLER)
            yield name, "hf", build


def vision_cases(only=None):
    import torchvision
    for name in sorted(torchvision.models.list_models(module=torchvision.models)):
        if only and name not in only:
            continue

        def build(name=name):
            model = torchvision.models.get_model(name, weights=None, num_classes=3)
            size = 299 if "inception" in name else (224 if name.startswith(("vit_", "swin", "maxvit")) else 64)
            return model, image_batch(None, torch.Generator().manual_seed(1), size=size)
        yield f"torchvision/{name}", "torchvision", build


def timm_cases(only=None):
    try:
        import timm
    except ImportError:
        return
    for module in sorted(timm.list_modules()):
        names = timm.list_models(module=module)
        if not names or (only and module not in only):
            continue
        name = sorted(names, key=len)[0]  # one per family, its shortest name

        def build(attempt=0, name=name):
            """64-pixel images (ViTs told so), else the model's own size."""
            kw = dict(pretrained=False, num_classes=3, drop_rate=0.0)
            if attempt == 0:
                try:
                    model = timm.create_model(name, img_size=64, **kw)
                except TypeError:  # a model without img_size: convolutional
                    model = timm.create_model(name, **kw)
                size = 64
            else:
                model = timm.create_model(name, **kw)
                size = min(model.default_cfg.get("input_size", (3, 224, 224))[-1], 224)
            return model, image_batch(None, torch.Generator().manual_seed(1), size=size)
        build.attempts = 2
        yield f"timm/{name}", "timm", build


FAMILIES = {"hf": hf_cases, "torchvision": vision_cases, "timm": timm_cases}


# ----------------------------------------------------------------------------
# Running one model


def moved(batch, device, dtype=None):
    return {k: v.to(device=device, dtype=dtype if dtype and v.is_floating_point() else v.dtype)
            for k, v in batch.items()}


def loss_of(model, batch):
    if "labels" in batch and not hasattr(model, "config"):  # torchvision / timm: logits
        out = model(batch["pixel_values"])
        out = out.logits if hasattr(out, "logits") else (out[0] if isinstance(out, tuple) else out)
        return torch.nn.functional.cross_entropy(out, batch["labels"])
    return model(**batch).loss


def train(model, batch, device, dtype=torch.float32, on_step=None):
    """Losses of STEPS AdamW steps with clipping; ``on_step(i)`` runs
    before step i."""
    model = copy.deepcopy(model).to(device=device, dtype=dtype)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = moved(batch, device, dtype)
    losses, times = [], []
    for step in range(STEPS):
        if on_step:
            on_step(step)
        start = time.perf_counter()
        loss = loss_of(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return losses, times


def worst_rel(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


@contextlib.contextmanager
def time_limit(seconds):
    def expire(signum, frame):
        raise TimeoutError(f"over {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def disc_error(exc):
    """The first line of an error, where disc names op and traced line."""
    text = f"{type(exc).__name__}: {exc}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if "disc: in aten::" in ln or "traced at" in ln]
    return (named[0] if named else lines[0])[:300]


@contextlib.contextmanager
def limited():
    """One run: quiet, and at most TIMEOUT_S seconds."""
    with warnings.catch_warnings(), time_limit(TIMEOUT_S):
        warnings.simplefilter("ignore")
        yield


def train_on_cpu(build):
    """(model, batch, losses, step times, attempt) of the first build
    CPU eager trains; raises the last attempt's error."""
    attempts = getattr(build, "attempts", 1)
    for attempt in range(attempts):
        try:
            with limited():
                torch.manual_seed(0)
                model, batch = build(attempt) if attempt else build()
                check_size(no_dropout(model))
                return (model, batch, *train(model, batch, "cpu"), attempt)
        except Exception:  # noqa: BLE001 - the next, gentler attempt
            if attempt == attempts - 1:
                raise


def train_on_disc(model, batch):
    """Losses, step times, and counters of the last step: compiles and
    syncs (from before it to its loss.item())."""
    marks = {}

    def on_step(step):
        if step == STEPS - 1:
            torch_disc.sync()
            marks["compiles"], marks["syncs"] = metrics.counters()["compiles"], sum(metrics.syncs().values())
    metrics.reset()
    with limited():
        losses, times = train(model, batch, "disc", on_step=on_step)
        syncs = sum(metrics.syncs().values())
        torch_disc.sync()
    compiles = metrics.counters()["compiles"]
    return losses, times, dict(compiles=compiles, steady_compiles=compiles - marks["compiles"],
                               steady_syncs=syncs - marks["syncs"])


def verdict(row):
    if not all(math.isfinite(x) for x in row["disc"]):
        return "nan"
    if row["steady_compiles"]:
        return "recompiles"
    exact = row["exact"]
    as_close = exact is not None and \
        worst_rel(row["disc"], exact) <= FACTOR * worst_rel(row["eager"], exact) + 1e-7
    return "pass" if row["rel_vs_eager"] <= FLOOR or as_close else "numerics"


def run_case(name, family, build):
    """One model's row: its status and what decided it (module docstring)."""
    row = {"model": name, "family": family}
    try:
        model, batch, eager, eager_t, row["shrink"] = train_on_cpu(build)
    except Exception as e:  # noqa: BLE001 - CPU cannot train it: not counted
        return dict(row, status="cpu-error", error=disc_error(e))
    if not all(math.isfinite(x) for x in eager):
        return dict(row, status="cpu-error", error=f"eager losses not finite: {eager}")
    try:
        with limited():
            exact, _ = train(model, batch, "cpu", torch.float64)
    except Exception:  # noqa: BLE001 - a model that takes no float64
        exact = None
    try:
        losses, disc_t, counts = train_on_disc(model, batch)
    except Exception as e:  # noqa: BLE001
        return dict(row, status="error", error=disc_error(e), fallbacks=metrics.fallbacks())
    row.update(eager=eager, disc=losses, exact=exact, fallbacks=metrics.fallbacks(), **counts,
               ms_disc=disc_t[-1] * 1e3, ms_eager=eager_t[-1] * 1e3, rel_vs_eager=worst_rel(losses, eager))
    row["status"] = verdict(row)
    return row


# ----------------------------------------------------------------------------
# The sweep and its table


def cases(families, only=None):
    for family in families:
        yield from FAMILIES[family](only)


def load_rows(path):
    rows = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                rows[r["model"]] = r
    return rows


def sweep(families, only, log, max_cases=None):
    """Runs every case not in ``log`` yet (one JSON line each), at most
    ``max_cases`` of them; a case that was started but never finished
    killed the process: "crashed". Returns the rows and whether all ran."""
    rows = load_rows(log)
    ran = 0
    for name, family, build in cases(families, only):
        if name in rows and rows[name].get("status") != "started":
            continue
        if max_cases is not None and ran >= max_cases:
            return rows, False
        ran += 1
        if rows.get(name, {}).get("status") == "started":
            row = {"model": name, "family": family, "status": "crashed",
                   "error": "the process died in this model"}
        else:
            with open(log, "a") as f:
                f.write(json.dumps({"model": name, "family": family, "status": "started"}) + "\n")
            row = run_case(name, family, build)
        print(f"{row['status']:>10}  {name}  {row.get('error', '')[:120]}", flush=True)
        with open(log, "a") as f:
            f.write(json.dumps(row) + "\n")
        rows[name] = row
    return rows, True


def markdown(rows):
    counted = [r for r in rows.values() if r["status"] not in ("cpu-error", "started")]
    lines = ["# Model sweep: disc vs CPU eager", "",
             f"{STEPS} AdamW steps with clipping, batch {BATCH}; see tests/python/model_sweep.py.", "",
             "| family | models | pass | numerics | recompiles | nan | error | crashed | CPU cannot train |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for family in sorted({r["family"] for r in rows.values()}):
        fam = [r for r in rows.values() if r["family"] == family]
        n = {s: sum(r["status"] == s for r in fam) for s in
             ("pass", "numerics", "recompiles", "nan", "error", "crashed", "cpu-error")}
        lines.append(f"| {family} | {len(fam) - n['cpu-error']} | {n['pass']} | {n['numerics']} | "
                     f"{n['recompiles']} | {n['nan']} | {n['error']} | {n['crashed']} | {n['cpu-error']} |")
    ratios = [r["ms_eager"] / r["ms_disc"] for r in counted if r.get("ms_disc")]
    if ratios:
        lines += ["", f"Median third-step time ratio eager / disc over {len(ratios)} models: "
                      f"{statistics.median(ratios):.2f} (one step each: indicative)."]
    lines += ["", "## Not passing", "", "| model | status | detail |", "|---|---|---|"]
    for r in sorted(counted, key=lambda r: (r["status"], r["model"])):
        if r["status"] == "pass":
            continue
        detail = r.get("error") or (f"rel vs eager {r.get('rel_vs_eager', 0):.1e}, "
                                    f"steady compiles {r.get('steady_compiles')}")
        lines.append(f"| {r['model']} | {r['status']} | {detail.replace('|', '/')} |")
    fb = {}
    for r in counted:
        for op, count in (r.get("fallbacks") or {}).items():
            fb.setdefault(op, []).append(r["model"])
    if fb:
        lines += ["", "## CPU fallbacks by op", "", "| op | models |", "|---|---|"]
        for op, models in sorted(fb.items()):
            lines.append(f"| {op} | {len(models)}: {', '.join(models[:8])}{' ...' if len(models) > 8 else ''} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="hf,torchvision,timm")
    p.add_argument("--only", default="", help="comma list of model types / names")
    p.add_argument("--log", default="results/model_sweep.jsonl", help="one JSON line per model; resumes")
    p.add_argument("--out", default="results/model_sweep.md")
    p.add_argument("--per-process", type=int, default=CASES_PER_PROCESS,
                   help="models per worker process (every compiled graph stays cached in a process)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(os.path.dirname(args.log) or ".", exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    if args.worker:
        # A model too large for the machine fails with an error, not the
        # kernel's OOM killer (which could pick another process).
        limit = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.7)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        return 0 if sweep(args.families.split(","), only, args.log, args.per_process)[1] else 3
    # Workers of a bounded number of models each, until one finishes the
    # list; a worker that dies leaves its model "started", the next one
    # records it as crashed and goes on.
    worker = [sys.executable, os.path.abspath(__file__), "--worker", "--families", args.families,
              "--only", args.only, "--log", args.log, "--per-process", str(args.per_process)]
    while subprocess.run(worker).returncode != 0:
        if not os.path.exists(args.log):
            raise SystemExit("model sweep: the worker failed before its first model")
    with open(args.out, "w") as f:
        f.write(markdown(load_rows(args.log)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
