"""aisim plot: the figures render (PNG and SVG), have a sensible size and are not blank."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from aisim.cli import main
from tests.analysis_configs import OP_LEVEL, PD_OP_LEVEL, PRESSURE

matplotlib = pytest.importorskip(
    "matplotlib", reason="matplotlib is the aisim-serving[plot] extra (CI installs it with [test])"
)


def _assert_png_drawn(path: Path, min_px: int = 300) -> None:
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert h >= min_px and w >= min_px
    rgb = img[..., :3]
    non_white = np.mean(np.any(rgb < 0.95, axis=-1))
    assert 0.01 < non_white < 0.9, non_white  # something is drawn, not a filled block
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 20  # lines, text, colours


def _assert_svg(path: Path) -> None:
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert text.count("<path") > 20 and path.stat().st_size > 10_000


def test_sweep_figures(tmp_path: Path) -> None:
    cfg = tmp_path / "base.yaml"
    cfg.write_text(OP_LEVEL)
    out = tmp_path / "sw"
    res = CliRunner().invoke(
        main,
        [
            "sweep",
            "-c",
            str(cfg),
            "--grid",
            "traffic.load.concurrency=1,2,4,8,16,0",
            "--grid",
            "engine.workers.aggregated.scheduler.max_batched_tokens=512,2048",
            "-o",
            str(out),
            "--jobs",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["plot", str(out)])
    assert res.exit_code == 0, res.output
    names = sorted(Path(p).name for p in res.output.split())
    assert names == ["latency.png", "latency.svg", "pareto.png", "pareto.svg"]
    for stem in ("pareto", "latency"):
        _assert_png_drawn(out / f"{stem}.png")
        _assert_svg(out / f"{stem}.svg")


def test_timeline_figure(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(PRESSURE)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-passes"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main, ["plot", str(out / "passes.parquet"), "--format", "png", "-o", str(tmp_path / "img")]
    )
    assert res.exit_code == 0, res.output
    _assert_png_drawn(tmp_path / "img" / "timeline.png")


def test_disaggregated_timeline_per_pool(tmp_path: Path) -> None:
    cfg = tmp_path / "pd.yaml"
    cfg.write_text(PD_OP_LEVEL)
    out = tmp_path / "run"
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg), "-o", str(out), "--capture-passes"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["plot", str(out), "--format", "png"])
    assert res.exit_code == 0, res.output
    assert sorted(Path(p).name for p in res.output.split()) == [
        "timeline-decode.png",
        "timeline-prefill.png",
    ]
    for role in ("prefill", "decode"):
        _assert_png_drawn(out / f"timeline-{role}.png")


def test_pareto_front() -> None:
    from aisim.plot import pareto_front

    x = np.array([1.0, 2.0, 3.0, 2.0, 0.5])
    y = np.array([5.0, 4.0, 1.0, 3.0, 5.0])
    assert pareto_front(x, y).tolist() == [0, 1, 2]


def test_plot_without_data_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["plot", str(tmp_path)])
    assert res.exit_code == 2 and "passes.parquet" in res.output


def test_flat_series_show_plain_numbers_and_sweeps_carry_their_deployment(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt
    import pyarrow.parquet as pq

    from aisim.plot import _plain, deployment

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [1.7, 1.7 + 1e-12, 1.7 - 1e-12])  # float noise on a flat series
    _plain(ax)
    fig.canvas.draw()
    assert ax.yaxis.get_major_formatter().get_offset() == ""
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert all("e" not in t and t.replace(".", "").replace("−", "").isdigit() for t in labels)
    plt.close(fig)
    cfg = tmp_path / "base.yaml"
    cfg.write_text(OP_LEVEL)
    out = tmp_path / "sw"
    args = ["sweep", "-c", str(cfg), "--grid", "traffic.load.concurrency=1,4", "-o", str(out)]
    assert CliRunner().invoke(main, args).exit_code == 0
    title = deployment(pq.read_table(out / "sweep.parquet"))
    assert title.startswith("Qwen/Qwen3-32B | b200_sxm | vllm") and " TP" in title
