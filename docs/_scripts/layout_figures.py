"""Pictures of each layout's members, drawn from real tensors at build time.

One small matrix (the 4 x 6 example of the BSR note, seed 003, with some entries zero) is
stored in each of the five layouts by ``sparsetensor`` itself; the picture shows the matrix,
each stored element (or block) in its own colour, and the member arrays with the same
colours, so that a reader sees which index and which value belong to which element.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

DENSE = np.array([[0, 1, 0, 0, 2, 0],
                  [3, 0, 0, 0, 0, 4],
                  [0, 0, 0, 0, 0, 0],
                  [0, 5, 6, 0, 0, 0]], dtype=np.float64)
BLOCKSIZE = (2, 3)
LAYOUTS = ("coo", "csr", "csc", "bsr", "bsc")


def tensors():
    """{layout: tensor} of DENSE in every layout (built by sparsetensor, not by hand)."""
    import sparsetensor as st

    out = {}
    for layout in LAYOUTS:
        blocked = layout in ("bsr", "bsc")
        out[layout] = st.from_dense(DENSE, layout, blocksize=BLOCKSIZE if blocked else None)
    return out


def owners(t) -> np.ndarray:
    """For each cell of the matrix, the position of the stored element (or block) that holds
    it, or -1: read back from the members, the way a kernel reads them."""
    own = np.full(t.shape, -1)
    layout = str(t.layout).rsplit("_", 1)[-1]
    if layout == "coo":
        rows, cols = np.asarray(t.indices())
        own[rows, cols] = np.arange(rows.size)
        return own
    if layout in ("csr", "bsr"):
        compressed, plain = np.asarray(t.crow_indices()), np.asarray(t.col_indices())
    else:
        compressed, plain = np.asarray(t.ccol_indices()), np.asarray(t.row_indices())
    r, c = t.blocksize if layout in ("bsr", "bsc") else (1, 1)
    for i in range(compressed.size - 1):
        for k in range(compressed[i], compressed[i + 1]):
            bi, bj = (i, plain[k]) if layout in ("csr", "bsr") else (plain[k], i)
            own[bi * r:(bi + 1) * r, bj * c:(bj + 1) * c] = k
    return own


def members(t):
    """[(label, 1-d array, element position of each item or None)] of ``t``'s index members."""
    layout = str(t.layout).rsplit("_", 1)[-1]
    if layout == "coo":
        ind = np.asarray(t.indices())
        k = np.arange(ind.shape[1])
        return [("indices[0]", ind[0], k), ("indices[1]", ind[1], k)]
    names = ("crow_indices", "col_indices") if layout in ("csr", "bsr") else ("ccol_indices", "row_indices")
    comp = np.asarray(getattr(t, names[0])())
    plain = np.asarray(getattr(t, names[1])())
    return [(names[0], comp, None), (names[1], plain, np.arange(plain.size))]


def draw(layout: str, t, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    colors = plt.get_cmap("tab10").colors
    own = owners(t)
    nrows, ncols = t.shape
    blocked = layout in ("bsr", "bsc")
    values = np.asarray(t.values())
    rows = members(t)
    width = 16 if blocked else 15
    fig = plt.figure(figsize=(9.5, 3.2))
    ax = fig.add_axes((0.02, 0.08, 0.3, 0.84))
    ax.set_title(f"{layout}: matrix {nrows} x {ncols}" + (f", blocks {t.blocksize[0]} x {t.blocksize[1]}"
                                                          if blocked else ""), fontsize=10)
    for i in range(nrows):
        for j in range(ncols):
            k = own[i, j]
            face = (*colors[k % 10][:3], 0.45) if k >= 0 else "white"
            ax.add_patch(Rectangle((j, -i - 1), 1, 1, facecolor=face, edgecolor="0.6"))
            v = DENSE[i, j]
            if v or k >= 0:
                ax.text(j + 0.5, -i - 0.5, f"{v:g}", ha="center", va="center", fontsize=9)
    if blocked:
        r, c = t.blocksize
        for bi in range(nrows // r + 1):
            ax.plot([0, ncols], [-bi * r, -bi * r], color="k", lw=1.2)
        for bj in range(ncols // c + 1):
            ax.plot([bj * c, bj * c], [0, -nrows], color="k", lw=1.2)
    ax.set_xlim(-0.1, ncols + 0.1)
    ax.set_ylim(-nrows - 0.1, 0.1)
    ax.set_aspect("equal")
    ax.axis("off")

    mx = fig.add_axes((0.36, 0.02, 0.62, 0.9))
    y = 0.0
    for label, arr, pos in rows:
        mx.text(-0.3, y + 0.5, label, ha="right", va="center", fontsize=9, family="monospace")
        for n, v in enumerate(arr):
            face = (*colors[pos[n] % 10][:3], 0.45) if pos is not None else "0.92"
            mx.add_patch(Rectangle((n, y), 1, 1, facecolor=face, edgecolor="0.4"))
            mx.text(n + 0.5, y + 0.5, str(v), ha="center", va="center", fontsize=9)
        y -= 1.5
    mx.text(-0.3, y + 0.5, "values", ha="right", va="center", fontsize=9, family="monospace")
    if not blocked:
        for n, v in enumerate(values):
            mx.add_patch(Rectangle((n, y), 1, 1, facecolor=(*colors[n % 10][:3], 0.45), edgecolor="0.4"))
            mx.text(n + 0.5, y + 0.5, f"{v:g}", ha="center", va="center", fontsize=9)
        bottom = y
    else:
        # values: (nnz,) + blocksize; each block drawn as it is stored (row-major in memory)
        x = 0.0
        scale = 0.7
        for n, block in enumerate(values):
            br, bc = block.shape
            for a in range(br):
                for b in range(bc):
                    mx.add_patch(Rectangle((x + b * scale, y + 1 - (a + 1) * scale), scale, scale,
                                           facecolor=(*colors[n % 10][:3], 0.45), edgecolor="0.4"))
                    mx.text(x + (b + 0.5) * scale, y + 1 - (a + 0.5) * scale, f"{block[a, b]:g}",
                            ha="center", va="center", fontsize=8)
            x += bc * scale + 0.5
        bottom = y + 1 - values.shape[1] * scale
    mx.text(-0.3, bottom - 1.0, f"nnz = {t.nnz}" + (" blocks" if blocked else ""), ha="right", va="center",
            fontsize=9)
    mx.set_xlim(-5.5, width - 5)
    mx.set_ylim(bottom - 1.6, 1.2)
    mx.set_aspect("equal")
    mx.axis("off")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for layout, t in tensors().items():
        draw(layout, t, out / f"layout_{layout}.png")
