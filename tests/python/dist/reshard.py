"""Every resharding between pairs of spec kinds, run on the ranks: each rank's output block against numpy.
2 ranks: mesh (m=2); 4 ranks: mesh (a=2, b=2) with specs on two axes."""
import itertools

import numpy as np

import kiln
from common import check, ok

n = kiln.dist.size()
if n == 2:
    mesh = kiln.dist.Mesh(("m", 2))
    specs = ["R R", "S(m) R", "R S(m)", "R R partial(m)"]
else:
    mesh = kiln.dist.Mesh(("a", 2), ("b", 2))
    specs = ["R R", "S(a) S(b)", "S(b) S(a)", "S(a,b) R", "R S(b)", "S(a) R partial(b)", "R R partial(a,b)"]
rank = kiln.dist.rank()
names = [a for a, _ in mesh.axes]
rng = np.random.default_rng(7)
G = rng.standard_normal((4, 8)).astype("float32")
E = rng.standard_normal((4, 8)).astype("float32")


def parse(spec):
    dims, partial = [], []
    for tok in spec.split():
        axes = [] if tok == "R" else tok[tok.index("(") + 1:-1].split(",")
        (partial if tok.startswith("partial") else dims).append(axes)
    return dims, [a for p in partial for a in p]


def block(a, dims, r):
    c = dict(zip(names, mesh.coords(r)))
    size = dict(mesh.axes)
    sl = []
    for d, axes in enumerate(dims):
        idx, k = 0, 1
        for ax in axes:
            idx, k = idx * size[ax] + c[ax], k * size[ax]
        ln = a.shape[d] // k
        sl.append(slice(idx * ln, (idx + 1) * ln))
    return a[tuple(sl)]


def addend(a, partial, r):
    # The ranks of a partial group hold addends that sum to the block: the first holds the rest.
    c = dict(zip(names, mesh.coords(r)))
    k = int(np.prod([dict(mesh.axes)[p] for p in partial])) if partial else 1
    return a - (k - 1) * E[: a.shape[0], : a.shape[1]] if all(c[p] == 0 for p in partial) else E[: a.shape[0], : a.shape[1]].copy()


count = 0
for src, dst in itertools.product(specs, specs):
    sg = kiln._ffi._kiln.dist.reshard_graph([4, 8], "float32", mesh, src, dst)
    plan = kiln.dist.Plan(sg, sg.graph)
    sdims, spart = parse(src)
    (out,) = plan.compile().run([addend(block(G, sdims, rank), spart, rank)], local=True)
    ddims, dpart = parse(dst)
    outs = kiln.dist.all_gather(out)
    c = dict(zip(names, mesh.coords(rank)))
    group = [r for r in range(n) if all(mesh.coords(r)[i] == mesh.coords(rank)[i] for i, a in enumerate(names) if a not in dpart)]
    total = sum(outs[r] for r in group)
    check(np.allclose(total, block(G, ddims, rank), rtol=1e-5, atol=1e-5),
          f"{src} -> {dst}: {[c[0] for c in sg.collectives()]} gave a wrong block")
    count += 1
ok(f"{count} reshardings")
