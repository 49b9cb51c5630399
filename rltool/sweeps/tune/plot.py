"""``rltool plot <study>``: a study's optimisation history (each completed trial's value, the
best so far, the pruned trials) and its parameter importances, side by side in one PNG."""

from __future__ import annotations

from pathlib import Path

from rltool.analysis.plot import check_out, pyplot, save
from rltool.sweeps.tune import results


def plot_study(folder: Path, out: Path | None) -> Path:
    """Draws the study in ``folder`` into ``out`` (default ``<folder>/study.png``); returns the
    file written."""
    study = results.load(folder)
    objective = results.st.load_meta(folder)["objective"]
    out = out or Path(folder) / "study.png"
    plt = pyplot()
    fig, (hist, imp) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    check_out(plt, fig, out)
    numbers, values, best = results.history(study)
    hist.plot(numbers, values, "o", label="trial")
    hist.step(numbers, best, where="post", label="best so far")
    cut = results.pruned(study)
    if cut:  # no value: an x on the axis's floor, so the plot shows every trial that ran
        floor = hist.get_xaxis_transform()
        hist.plot(cut, [0.02] * len(cut), "x", color="grey", transform=floor, label="pruned")
    hist.set_xlabel("trial")
    hist.set_ylabel(objective)
    hist.set_title(
        f"optimisation history ({len(numbers)} completed, {len(cut)} pruned)", fontsize=9
    )
    hist.legend(fontsize=8)
    hist.grid(alpha=0.3)
    weights = results.importances(study)
    names = list(weights)[::-1]  # the most important on top
    imp.barh(names, [weights[n] for n in names])
    imp.set_xlabel("importance (fANOVA)")
    imp.set_title("parameter importances" if weights else "importances: too few trials", fontsize=9)
    save(plt, fig, out)
    return out
