"""`python -m kvsim.analysis.validate`'s per-request plot (`results/plots/validation.png`): measured against
simulated TTFT and E2E of each real run, replayed as it ran (`kvsim.analysis.validate.validate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

DPI = 110


def plot_requests(results: dict[str, Any], path: Path) -> None:
    """Measured against simulated per-request TTFT and E2E (the calibrated roofline), one row per run."""
    import matplotlib

    matplotlib.use("Agg")
    fig = requests_figure(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)


def requests_figure(results: dict[str, Any]) -> Any:
    """The figure `plot_requests` writes: per run, measured against simulated TTFT and E2E."""
    from matplotlib.figure import Figure

    n = len(results)
    # (constrained layout makes room for the two-line title: on one line, under tight_layout, its ends fell
    # outside the 990-px figure, the key among them, user53 #4)
    fig = Figure(figsize=(9, 3.6 * n), layout="constrained")
    for i, (name, r) in enumerate(results.items()):
        run, sim = r["run"], r["sims"]["calibrated"]
        for j, (label, meas, simv) in enumerate(
            (
                ("TTFT (s)", run.first_token - run.arrival, sim["first_token"] - sim["arrival"]),
                ("E2E (s)", run.finish - run.arrival, sim["finish"] - sim["arrival"]),
            )
        ):
            ax = fig.add_subplot(n, 2, 2 * i + j + 1)
            ax.scatter(meas, simv, s=6, alpha=0.6)
            hi = float(max(meas.max(), simv.max())) * 1.05
            ax.plot([0, hi], [0, hi], color="gray", linewidth=0.8)
            ax.set_xlim(0, hi)
            ax.set_ylim(0, hi)
            ax.set_xlabel(f"measured {label}")
            ax.set_ylabel(f"kvsim {label}")
            ax.set_title(f"{name}: {label.split()[0]}", fontsize=9)
    fig.suptitle(
        "Per request: kvsim (calibrated roofline, vLLM 0.19's scheduler, each run replayed as it ran)\n"
        "against the measured vLLM runs; grey line: kvsim = measured",
        fontsize=9,
    )
    return fig
