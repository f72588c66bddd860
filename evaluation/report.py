"""Human-readable outputs of a run: the Markdown tables (metrics; where the answers were
lost) and the plots (accuracy against tokens; the lost questions by step)."""

from __future__ import annotations

from pathlib import Path

from lokg.evaluation.breakdown import MISS_ROWS, ROWS

#: Markdown columns: (header, summary key, format).
COLUMNS = (
    ("method", None, None),
    ("n", "n", "{:d}"),
    ("H@1", "H@1", "{:.3f}"),
    ("Hit", "Hit", "{:.3f}"),
    ("F1", "F1", "{:.3f}"),
    ("TCR", "TCR", "{:.3f}"),
    ("tok/q", "tok/q", "{:.1f}"),
    ("calls/q", "calls/q", "{:.2f}"),
    ("P@1K", "P@1K", "{:.2f}"),
    ("H@1K", "H@1K", "{:.2f}"),
    ("latency mean ms", "latency_ms_mean", "{:.1f}"),
    ("latency p95 ms", "latency_ms_p95", "{:.1f}"),
    ("failed calls", "failed_calls", "{:d}"),
)


def markdown_table(summary: dict) -> str:
    """One row per method; ``—`` for an undefined value (TCR without knowledge, P@1K at 0 tok)."""
    head = "| " + " | ".join(h for h, _, _ in COLUMNS) + " |"
    rule = "|" + "|".join("---" if key is None else "--:" for _, key, _ in COLUMNS) + "|"
    rows = [head, rule]
    for method, values in summary.items():
        cells = [f"`{method}`"]
        for _, key, fmt in COLUMNS[1:]:
            value = values.get(key)
            cells.append("—" if value is None else fmt.format(value))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def breakdowns(summary: dict) -> dict[str, dict]:
    """Method → breakdown, for the methods that have one (evaluation/breakdown.py)."""
    return {m: v["breakdown"] for m, v in summary.items() if v.get("breakdown")}


def breakdown_table(summary: dict) -> str:
    """A row per breakdown row, a column per method with a breakdown, each cell
    ``questions (lost)``; "" when no method has one."""
    methods = breakdowns(summary)
    if not methods:
        return ""
    lines = ["| step | " + " | ".join(f"`{m}`" for m in methods) + " |",
             "|---|" + "--:|" * len(methods)]
    for key, label, _ in ROWS:
        if key.startswith("predictor_") and not any(b.get(key, {}).get("questions")
                                                    for b in methods.values()):
            continue  # a predictor no question used
        cells = [f"{b[key]['questions']} ({b[key]['lost']})" for b in methods.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


BREAKDOWN_NOTE = (
    "Cells: questions (of which lost, H@1 = 0). The rows from *linked wrong* to *derivation "
    "right* split the questions by the first step that went wrong, the *answered* rows by the "
    "path that answered: each block sums to all questions, and its losses to all losses. The "
    "*chain by* rows split the questions the relation knowledge saw by what predicted their "
    "chain (the kNN vote, a rule revising it, the lexicon, the zero-shot matcher).")


def render_markdown(summary: dict, run: dict) -> str:
    """summary.md: what was run, the table, and the command(s) that produced it."""
    settings = run["settings"]
    data = settings["dataset"]
    lines = [
        f"# Evaluation: {data['kind']} `{data['source']}`"
        + (f", split `{data['split']}`" if data.get("split") else ""),
        "",
        f"Reader `{settings['llm']}`, knowledge budget B = {settings['budget']} tokens, topic "
        f"entities: {settings['entities']}, stores: "
        + ", ".join(f"{k} `{v}`" for k, v in sorted(settings["stores"].items())) + ".",
        "",
        markdown_table(summary),
        "TCR: mean T_after/T_naive over questions with knowledge; P@1K, H@1K = 1000·F1/tok/q "
        "and 1000·H@1/tok/q from the averages (— when tok/q = 0).",
        "",
    ]
    table = breakdown_table(summary)
    if table:
        lines += ["Where the answers were lost (evaluation/breakdown.py):", "", table,
                  BREAKDOWN_NOTE, ""]
    lines += ["Command(s):", ""]
    lines += [f"    {command}" for command in run.get("commands", [])]
    return "\n".join(lines) + "\n"


def _axes(height: float):
    """A figure and its axes on the non-interactive backend (no display on a build host)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(7.5, height), dpi=120)


def _save(fig, ax, path: str | Path, title: str) -> Path:
    """Title, legend beside the axes, and the PNG (no Software tag: the bytes do not name the
    matplotlib version)."""
    import matplotlib.pyplot as plt

    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, format="png", metadata={"Software": None})
    plt.close(fig)
    return path


def plot_accuracy_vs_tokens(summary: dict, path: str | Path, title: str = "") -> Path:
    """H@1 (circles) and F1 (triangles) against tok/q, one colour per method, as a PNG."""
    from matplotlib import colormaps

    fig, ax = _axes(4.8)
    cmap = colormaps["tab10"]
    for i, (method, values) in enumerate(summary.items()):
        x = values["tok/q"]
        colour = cmap(i % 10)
        ax.scatter([x], [values["H@1"]], marker="o", s=60, color=colour, label=f"{method} H@1")
        ax.scatter([x], [values["F1"]], marker="^", s=60, color=colour, facecolors="none",
                   label=f"{method} F1")
    most = max((values["tok/q"] for values in summary.values()), default=0.0)
    ax.set_xlabel("tokens per question (prompt + completion, cl100k_base)")
    ax.set_ylabel("score")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(-0.02 * max(most, 1.0), 1.1 * max(most, 1.0))  # the none reader sits at 0
    ax.grid(True, alpha=0.3)
    return _save(fig, ax, path, title)


def plot_loss_by_step(summary: dict, path: str | Path, title: str = "") -> Path | None:
    """A bar per method with a breakdown: its lost questions as shares of all, stacked by the
    first step that went wrong; None (nothing drawn) when no method has a breakdown."""
    methods = breakdowns(summary)
    if not methods:
        return None
    from matplotlib import colormaps

    fig, ax = _axes(1.6 + 0.45 * len(methods))
    names, left = list(methods), [0.0] * len(methods)
    for i, (key, label, miss) in enumerate(MISS_ROWS):
        shares = [b[key]["lost"] / b["all"]["questions"] for b in methods.values()]
        ax.barh(names, shares, left=left, color=colormaps["tab10"](i),
                label=label if miss else f"{label}: lost by the gate or the fallback")
        left = [a + b for a, b in zip(left, shares)]
    ax.invert_yaxis()
    ax.set_xlabel("lost questions (H@1 = 0) as a share of all, by the first step that failed")
    ax.set_xlim(0, max(1e-9, max(left)) * 1.05)
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, ax, path, title)
