"""Lecture notebooks run top to bottom as a person runs them and write their figures. Small sizes:
MLSYS_QUICK=1. (Each lab's notebook runs top to bottom, demos included, in tests/test_kit_runs.py.)"""

import nbformat
import pytest

from autograder.authoring.lectures import render_lectures
from autograder.paths import LECTURES

pytestmark = pytest.mark.slow

FIGURES = {
    "lec01_tensors": ["lec01_traversal.png", "lec01_matmul_gflops.png", "lec01_roofline.png"],
    "lec02_autodiff": ["lec02_graph.png", "lec02_optimizers.png", "lec02_modes.png"],
    "lec03_graph_opt": ["lec03_fusion.png", "lec03_discovery.png", "lec03_search.png"],
    "lec04_memory": ["lec04_lifetimes.png", "lec04_checkpointing.png", "lec04_zero.png"],
    "lec05_precision": ["lec05_formats.png", "lec05_quant_error.png", "lec05_mixed_precision.png"],
    "lec06_gpu": ["lec06_tiling.png", "lec06_roofline.png", "lec06_attention.png", "lec06_path.png"],
    "lec07_collectives": ["lec07_alpha_beta.png", "lec07_bandwidth.png", "lec07_bytes.png"],
    "lec08_parallelism": ["lec08_schedules.png", "lec08_bubble.png", "lec08_memory.png", "lec08_tradeoff.png"],
    "lec09_compiler": ["lec09_schedules.png", "lec09_search.png", "lec09_cost_model.png", "lec09_bucketing.png"],
    "lec10_llm": ["lec10_flops.png", "lec10_intensity.png", "lec10_kv_cache.png", "lec10_fragmentation.png",
                  "lec10_serving.png", "lec10_speculative.png"],
    "lec11_distributed": ["lec11_overlap.png", "lec11_buckets.png", "lec11_zero_memory.png", "lec11_stragglers.png"],
    "lec12_gpu_perf": ["lec12_coalescing.png", "lec12_bank_conflicts.png", "lec12_reduction.png", "lec12_scan.png",
                       "lec12_occupancy.png"],
}

#: The claims each lecture's timing figures state with mlsys_lib.viz.claim (their ratio is printed; at
#: quick sizes on a busy machine a claim may not hold, so only their presence is tested here).
CLAIMS = {
    "lec01_tensors": {"row order is faster than column order", "the tiled kernel is faster than the naive one"},
    "lec02_autodiff": {"reverse mode beats forward mode on R^n -> R", "forward mode beats reverse mode on R -> R^n"},
    "lec03_graph_opt": {"the fused chain is faster than the unfused one"},
    "lec06_gpu": {"tiling reads fewer global bytes per FLOP than the naive kernel",
                  "block tiling reads fewer global bytes per FLOP than every earlier matmul step",
                  "block tiling reads fewer shared bytes per FLOP than tiling",
                  "fused attention reads fewer global bytes per FLOP than naive attention",
                  "flash attention reads fewer global bytes per FLOP than fused attention",
                  "at GPU sizes the block-tiled matmul's traffic lets it reach its 40% floor",
                  "at GPU sizes flash attention's traffic lets it reach its 25% floor"},
    "lec09_compiler": {"the scheduled kernel is faster than the naive one",
                       "the tiled kernel with local accumulators is faster than the reordered one",
                       "model-guided search reaches 95% of the best in fewer trials than random search"},
    "lec10_llm": {"continuous batching sustains more throughput than static batching at equal p99 latency"},
    "lec11_distributed": {"all-reducing gradient buckets during backward beats one all-reduce after backward"},
}

#: Lectures whose claims are counted on the simulator or planned (bytes, not seconds): they hold on any machine.
COUNTED = {"lec06_gpu"}


@pytest.mark.parametrize("lecture", sorted(p.stem for p in LECTURES.glob("lec*.ipynb")))
def test_lecture_renders_its_figures(lecture, course_root, monkeypatch):
    monkeypatch.setenv("MLSYS_QUICK", "1")
    assert lecture in FIGURES, f"list the figures {lecture} must write"
    for name in FIGURES[lecture]:
        (LECTURES / "figures" / name).unlink(missing_ok=True)
    rendered = render_lectures([lecture], root=course_root)
    for name in FIGURES[lecture]:
        path = LECTURES / "figures" / name
        assert path in rendered.figures and path.stat().st_size > 10_000, f"{lecture} did not draw {name}"
    claimed = {line.split(":")[1].strip() for _, _, line in rendered.claims}
    assert claimed >= CLAIMS.get(lecture, set()), f"{lecture} no longer measures the claims its figures make"
    if lecture in COUNTED:
        wrong = [line for name, holds, line in rendered.claims if name == lecture and not holds]
        assert not wrong, f"{lecture}'s claims are counted, not timed, so they must hold: {wrong}"
