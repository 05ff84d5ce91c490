#!/usr/bin/env python3
"""Pictures of the field-test results (docs/field-tests.md), with matplotlib.

  python plot.py RESULTS.json OUT_DIR

Writes OUT_DIR/field-winner.png (the fastest forced protocol per network, placed by its
downlink rate and one-way latency, one panel per workload) and OUT_DIR/field-auto-ratio.png
(auto's time over the best forced protocol's, same layout)."""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap, Normalize  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field  # noqa: E402

COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]


def layout(grid):
    nets = grid["networks"]
    xs = sorted({(n["down_mbit"], n["up_mbit"]) for n in nets})
    ys = sorted({n["one_way_ms"] for n in nets})
    pos = {n["name"]: (xs.index((n["down_mbit"], n["up_mbit"])), ys.index(n["one_way_ms"])) for n in nets}
    xlabels = [f"{d:g}" if d == u else f"{d:g}/{u:g}" for d, u in xs]
    ylabels = [f"{y:g}" for y in ys]
    return pos, xlabels, ylabels


def panels(grid, cells):
    works = [w["name"] for w in grid["workloads"] if any(c["cell"].split("/")[1] == w["name"] for c in cells)]
    n = max(1, len(works))
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.8 * rows), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, list(zip(works, axes.flat))


def frame(ax, title, xlabels, ylabels):
    ax.set_title(title, fontsize=10)
    ax.set_xticks(range(len(xlabels)), xlabels, fontsize=7, rotation=45)
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=7)
    ax.set_xlabel("rate Mbit/s (down/up)", fontsize=8)
    ax.set_ylabel("one-way latency ms", fontsize=8)
    ax.set_xlim(-0.5, len(xlabels) - 0.5)
    ax.set_ylim(-0.5, len(ylabels) - 0.5)
    ax.set_facecolor("#f2f2f2")


def main():
    results, out = sys.argv[1], sys.argv[2]
    doc = field.load_json(results)
    grid = field.load_json(field.GRID)
    cells = field.summarize(doc)
    pos, xlabels, ylabels = layout(grid)
    forced = [p for p in doc["protocols"] if p not in field.AUTOS]
    cmap = ListedColormap(COLORS[: len(forced)])
    os.makedirs(out, exist_ok=True)
    stamp = f"measured {doc['started'][:10]} on a shared {doc['machine']['cpus']}-core machine"

    fig, ps = panels(grid, cells)
    for work, ax in ps:
        frame(ax, work, xlabels, ylabels)
        for c in cells:
            net, w = c["cell"].split("/")
            if w != work or c["best"] is None:
                continue
            x, y = pos[net]
            ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=cmap(forced.index(c["best"]))))
            times = sorted(r["wall_s"] for p, r in c["runs"].items() if p not in field.AUTOS and r["ok"])
            margin = f"\n{times[1] / times[0]:.1f}x" if len(times) > 1 else ""
            ax.text(x, y, f"{c['best']}{margin}", ha="center", va="center", fontsize=7, color="white")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(forced))]
    fig.legend(handles, forced, loc="outside lower center", ncols=len(forced),
               title="fastest (x: the next one's time over it)")
    fig.suptitle(f"Fastest forced protocol per network and workload ({stamp})", fontsize=11)
    fig.savefig(os.path.join(out, "field-winner.png"), dpi=110)
    plt.close(fig)

    norm = Normalize(1.0, 1.5)
    ratio_map = plt.get_cmap("RdYlGn_r")
    if not any(c["ratio"] is not None for c in cells):
        fig = plt.figure(figsize=(8, 2))
        fig.text(0.5, 0.5, f"No auto runs in these results ({stamp}):\nthe binary's psi match did not accept "
                 "--protocol auto.", ha="center", va="center", fontsize=11)
    else:
        fig, ps = panels(grid, cells)
        for work, ax in ps:
            frame(ax, work, xlabels, ylabels)
            for c in cells:
                net, w = c["cell"].split("/")
                if w != work or c["ratio"] is None:
                    continue
                x, y = pos[net]
                ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, color=ratio_map(norm(c["ratio"]))))
                ax.text(x, y, f"{c['ratio']:.2f}\n{c['choice']}", ha="center", va="center", fontsize=7)
        sm = plt.cm.ScalarMappable(norm=norm, cmap=ratio_map)
        fig.colorbar(sm, ax=[a for _, a in ps], shrink=0.6, label="auto time / best forced time (targets 1.10, 1.25)")
        fig.suptitle(f"auto's time over the best forced protocol's, and its choice ({stamp})", fontsize=11)
    fig.savefig(os.path.join(out, "field-auto-ratio.png"), dpi=110)
    plt.close(fig)
    print(f"plot.py: wrote {out}/field-winner.png and {out}/field-auto-ratio.png")


if __name__ == "__main__":
    main()
