# Thin wrappers; scripts/ stay the main entry points (scripts/test.sh,
# scripts/train_mnist.sh). Run `bash scripts/setup.sh` once first.
PYTHON ?= python3
PY_ENV = PYTHONPATH=.$${PYTHONPATH:+:$$PYTHONPATH}
# Sweeps run single-threaded (many small ops); benchmarks use the machine.
RUN = OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY_ENV) $(PYTHON)
BENCH_RUN = $(PY_ENV) $(PYTHON)

.PHONY: test sweep sweep-quick

test:
	bash scripts/test.sh

# PyTorch's OpInfo samples for every op in op_db, disc vs CPU (float32):
# the pass/fail/skip table goes to results/sweep.md. Takes a while.
sweep:
	$(RUN) tests/python/sweep_report.py --out results/sweep.md

# The CI subset only, as a table: results/sweep-quick.md.
sweep-quick:
	$(RUN) tests/python/sweep_report.py --quick --out results/sweep-quick.md

# Whole models (transformers' auto mappings per task head, torchvision,
# timm) trained on disc vs CPU eager: results/model_sweep.md, one JSON line
# per model in results/model_sweep.jsonl (a rerun resumes; delete it to
# start over). test_model_sweep.py runs its quick subset in CI.
.PHONY: model-sweep
model-sweep:
	$(RUN) tests/python/model_sweep.py --out results/model_sweep.md

# Roofline + MNIST + MiniLM-L6 + dynamic-shapes benchmarks, one report:
# results/bench.json, bench.md, bench.png (BENCH_ARGS: more options, see
# python -m benchmarks --help). bench-quick: the same as a smoke test.
.PHONY: bench bench-quick
bench:
	$(BENCH_RUN) -m benchmarks $(BENCH_ARGS)

bench-quick:
	$(BENCH_RUN) -m benchmarks --quick $(BENCH_ARGS)

# Randomized differential test: random op graphs on disc (compiled executor)
# vs disc (reference executor) vs CPU eager, FUZZ_GRAPHS programs (CI runs
# 1,000). A failure prints the seed, the program and the replay command
# (python tests/python/random_graphs --seed N). make sweep runs it too.
FUZZ_GRAPHS ?= 10000
.PHONY: fuzz
fuzz:
	DISC_FUZZ_GRAPHS=$(FUZZ_GRAPHS) $(RUN) -m pytest tests/python/test_random_graphs.py -q -k random_graphs_match

sweep: fuzz
