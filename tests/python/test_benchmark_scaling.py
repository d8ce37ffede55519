"""benchmarks.scaling end to end on its smoke-test model: one worker process
per backend, rows with ratios and disc's counters, and the three result
files.  Speed is not asserted (benchmarks only); counters disc decides are."""
import json

from benchmarks import scaling


def test_quick_study_writes_rows_table_and_plot(tmp_path):
    result = scaling.main(["--quick", "--models", "tiny-bert", "--lengths", "32",
                           "--backends", "cpu,disc", "--threads", "1",
                           "--results", str(tmp_path)])
    rows = {(r["mode"], r["backend"]): r for r in result["rows"]}
    assert set(rows) == {(m, b) for m in ("train", "eval") for b in ("cpu eager", "disc")}
    for r in rows.values():
        assert "error" not in r, r
        assert r["ms"] > 0 and r["vs_eager"] > 0 and r["batch"] == 1024 // 32
    for mode in ("train", "eval"):
        disc = rows[(mode, "disc")]
        # Two warm-up steps hold every graph a step makes: none compiles later.
        assert disc["fallbacks"] == 0 and disc["compiles"] >= 1 and disc["compiles_timed"] == 0
        assert disc["compile_s_per_graph"] > 0 and disc["trace_us_per_op"] > 0
        assert disc["allocator_peak_mib"] > 0
    saved = json.loads((tmp_path / "scaling.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(result["rows"]))
    assert "| tiny-bert | 32 x 32 | train | disc |" in (tmp_path / "scaling.md").read_text()
    assert (tmp_path / "scaling.png").stat().st_size > 0


def test_a_failing_worker_is_a_row_not_a_crash(tmp_path):
    # GPT-2's positions stop at n_positions: a longer batch fails in the worker.
    result = scaling.main(["--quick", "--models", "tiny-gpt2", "--lengths", "256",
                           "--backends", "cpu", "--modes", "eval", "--results", str(tmp_path)])
    (row,) = result["rows"]
    assert row["error"] and row["backend"] == "cpu eager"
