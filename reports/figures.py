"""Figures of the report, as base64 PNG (the HTML stays one self-contained file per page).

Each figure reads rows or a saved case's tensors; none recomputes a result. Axes that count tokens,
heads or keys are integer.
"""
from __future__ import annotations

import base64
import io
import math

import pandas as pd

def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _integer_axes(ax, nx: int | None = None, ny: int | None = None) -> None:
    """Integer ticks: every index for a short axis, a few whole numbers for a long one."""
    from matplotlib.ticker import MaxNLocator

    for axis, n in ((ax.xaxis, nx), (ax.yaxis, ny)):
        if n is not None and n <= 16:
            axis.set_ticks(range(n))
        else:
            axis.set_major_locator(MaxNLocator(integer=True))


def ratio_histograms(ratios: pd.DataFrame) -> str | None:
    """Small multiples, one per backend: how close to the tolerance its passes run (error / limit,
    log scale; the red line is the limit). `ratios`: columns backend, error_ratio (generated rows)."""
    r = ratios.dropna(subset=["error_ratio"])
    r = r[(r["error_ratio"] > 0) & (r["error_ratio"] < 1e6)]
    if r.empty:
        return None
    plt = _plt()
    backends = sorted(r["backend"].unique())
    cols = min(4, len(backends))
    rows = math.ceil(len(backends) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.1 * rows), squeeze=False, sharex=True)
    bins = [10 ** (x / 4) for x in range(-16, 25)]
    for ax, backend in zip(axes.flat, backends):
        values = r.loc[r["backend"] == backend, "error_ratio"].clip(lower=1e-4)
        ax.hist(values, bins=bins, color="#4a7")
        ax.set_xscale("log")
        ax.axvline(1.0, color="red", linestyle="--", linewidth=1)
        ax.set_title(f"{backend} (p99 {values.quantile(0.99):.2g})", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(backends):]:
        ax.axis("off")
    fig.supxlabel("max error / tolerance limit (fails right of the red line)", fontsize=8)
    fig.tight_layout()
    return _png(fig)


def failure_figures(tensors: dict, row: dict, case=None) -> dict[str, str]:
    """Heatmaps of |actual - expected| (tokens x heads) per sequence, the worst row's profile, and the
    oracle's visibility mask (query x key) of the worst sequence and head."""
    import torch

    plt = _plt()
    out = {}
    exp, act = tensors.get("expected_output"), tensors.get("actual_output")
    if exp is None or act is None or tuple(exp.shape) != tuple(act.shape) or exp.numel() == 0:
        return out
    err = (act.double() - exp.double()).abs().amax(-1)  # [tokens, heads]
    err = torch.nan_to_num(err, nan=float("inf"), posinf=float("inf"))  # not the dtype's max: it would be "finite"
    finite_max = float(err[torch.isfinite(err)].max()) if torch.isfinite(err).any() else 1.0
    shown = torch.where(torch.isfinite(err), err, torch.full_like(err, finite_max * 1.5 + 1e-12))
    starts = tensors["query_start_loc"].tolist()
    n = max(1, len(starts) - 1)
    fig, axes = plt.subplots(1, n, figsize=(min(3 * n, 14), 3), squeeze=False)
    for i in range(n):
        a, b = starts[i], starts[i + 1]
        ax = axes[0][i]
        if b > a:
            im = ax.imshow(shown[a:b].T.numpy(), aspect="auto", cmap="magma", interpolation="nearest")
            fig.colorbar(im, ax=ax, fraction=0.05)
        ax.set_title(f"seq {i}", fontsize=8)
        ax.set_xlabel("token")
        ax.set_ylabel("head")
        _integer_axes(ax, b - a, shown.shape[1])
    out["heatmap"] = _png(fig)
    t, h = row.get("worst_token_flat"), row.get("worst_head")
    if t is not None and h is not None and not (isinstance(t, float) and math.isnan(t)):
        fig, ax = plt.subplots(figsize=(7, 2.5))
        ax.plot(exp[int(t), int(h)].double().numpy(), label="expected (float64 oracle)")
        ax.plot(act[int(t), int(h)].double().numpy(), label="actual", linestyle="--")
        ax.set_xlabel("dim")
        _integer_axes(ax)
        ax.set_title(f"worst row: token {int(t)}, head {int(h)}", fontsize=8)
        ax.legend(fontsize=7)
        out["worst_row"] = _png(fig)
    if case is not None:
        mask = visibility_figure(case, int(row.get("worst_seq") or 0), int(row.get("worst_head") or 0))
        if mask:
            out["mask"] = mask
    return out


def visibility_figure(case, seq: int, head: int) -> str | None:
    """The oracle's mask (which keys each query of sequence `seq` sees, for query head `head`)."""
    from reference.visibility import visible

    if not 0 <= seq < len(case.sequences):
        return None
    mask = visible(case, case.sequences[seq], seq)
    m = mask[min(head, mask.shape[0] - 1)].numpy()
    if m.size == 0 or m.shape[0] * m.shape[1] > 4_000_000:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.imshow(m, aspect="auto", cmap="Greens", interpolation="nearest", vmin=0, vmax=1)
    ax.set_xlabel("key position")
    ax.set_ylabel("query (within the sequence)")
    ax.set_title(f"visible keys: seq {seq}, head {head}", fontsize=8)
    _integer_axes(ax, m.shape[1], m.shape[0])
    return _png(fig)


def worst_elements(tensors: dict, k: int = 10) -> list[dict]:
    import torch

    exp, act = tensors.get("expected_output"), tensors.get("actual_output")
    if exp is None or act is None or tuple(exp.shape) != tuple(act.shape) or exp.numel() == 0:
        return []
    d = torch.nan_to_num((act.double() - exp.double()).abs(), nan=float("inf"))
    vals, idx = d.flatten().topk(min(k, d.numel()))
    H, D = exp.shape[1], exp.shape[2]
    return [dict(token=int(i) // (H * D), head=(int(i) // D) % H, dim=int(i) % D, expected=float(exp.flatten()[i]),
                 actual=float(act.flatten()[i]), abs_err=float(v)) for v, i in zip(vals, idx)]


def lse_table(tensors: dict, k: int = 8) -> list[dict]:
    import torch

    e, a = tensors.get("expected_lse"), tensors.get("actual_lse")
    if e is None or a is None or tuple(e.shape) != tuple(a.shape) or e.numel() == 0:
        return []
    d = torch.nan_to_num((a.double() - e.double()).abs(), nan=float("inf"), posinf=float("inf"))
    d = torch.where(torch.isneginf(e) & torch.isneginf(a), torch.zeros_like(d), d)
    vals, idx = d.flatten().topk(min(k, d.numel()))
    H = e.shape[1]
    return [dict(token=int(i) // H, head=int(i) % H, expected=float(e.flatten()[i]), actual=float(a.flatten()[i]),
                 abs_err=float(v)) for v, i in zip(vals, idx)]


