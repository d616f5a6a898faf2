"""The range of one tensor over the calibration batches, three ways.

minmax: the smallest and largest value seen. percentile: the range clipped
at the 99.99th percentile of |x|. entropy: clipped at the threshold whose
8-bit quantization of the |x| histogram loses the least information (the
smallest KL divergence between the clipped histogram and its quantized
form), the search TensorRT's entropy calibrator describes.
Percentile and entropy read a histogram of |x| over [0, max |x|], so they
take a second pass over the batches once min/max are known; a tensor with
fewer than MIN_HIST_COUNT non-zero values seen keeps its min/max.
"""
import numpy as _np

METHODS = ("minmax", "percentile", "entropy")
HIST_BINS = 2048
PERCENTILE = 99.99
MIN_HIST_COUNT = 4 * HIST_BINS
STRIDE = 16  # the entropy search's coarse step, in bins


class TensorRange:
    """min/max of one tensor, then (for percentile and entropy) a histogram of |x| over [0, amax]."""

    def __init__(self):
        self.lo, self.hi = _np.inf, -_np.inf
        self.hist = None

    def observe_minmax(self, x):
        if x.size:
            self.lo, self.hi = min(self.lo, float(x.min())), max(self.hi, float(x.max()))

    @property
    def amax(self):
        return max(abs(self.lo), abs(self.hi))

    def observe_histogram(self, x):
        if self.hist is None:
            self.hist = _np.zeros(HIST_BINS, _np.int64)
        if self.amax > 0:
            # Exact zeros (a Relu's) are left out: they quantize exactly, and their spike in bin 0 would
            # dominate the entropy search's divergence.
            a = _np.abs(x[x != 0])
            h, _ = _np.histogram(a, bins=HIST_BINS, range=(0.0, self.amax))
            self.hist += h

    def range(self, method):
        """(lo, hi) to quantize to, for `method`."""
        # A histogram of a few thousand values (a small layer's output over few batches) is mostly empty
        # bins, and the divergence between sparse histograms says nothing: those keep their min/max.
        if method == "minmax" or self.amax == 0 or self.hist.sum() < MIN_HIST_COUNT:
            return self.lo, self.hi
        width = self.amax / HIST_BINS
        if method == "percentile":
            t = percentile_threshold(self.hist, PERCENTILE) * width
        else:
            t = entropy_threshold(self.hist, 256 if self.lo >= 0 else 128) * width
        return max(self.lo, -t), min(self.hi, t)


def percentile_threshold(hist, pct):
    """The number of bins (from 0) that hold pct percent of the histogram's count."""
    c = _np.cumsum(hist)
    return int(_np.searchsorted(c, c[-1] * pct / 100.0)) + 1


def _quantized(ref, hist, levels):
    """hist merged into `levels` groups of bins, each group's sum spread evenly over the bins where ref is non-empty."""
    edges = _np.linspace(0, len(hist), levels + 1).astype(_np.int64)
    nonzero = (ref > 0).astype(_np.float64)
    sums = _np.add.reduceat(hist, edges[:-1])
    counts = _np.add.reduceat(nonzero, edges[:-1])
    per_bin = _np.where(counts > 0, sums / _np.maximum(counts, 1), 0.0)
    return _np.repeat(per_bin, _np.diff(edges)) * nonzero


def _kl(p, q):
    p = p / p.sum()
    # The clipped tail folded into the edge bin may land where the quantized form has nothing: a small
    # mass there (as MXNet's smoothing) keeps the divergence finite, and large.
    q = _np.where((p > 0) & (q <= 0), 1e-4 * q.sum() / max(len(q), 1) + 1e-30, q)
    q = q / q.sum()
    m = p > 0
    return float(_np.sum(p[m] * _np.log(p[m] / q[m])))


def entropy_threshold(hist, levels):
    """The number of bins i >= levels whose clipping (the tail folded into bin i-1) quantizes with the least KL divergence."""
    hist = _np.asarray(hist, _np.float64)
    n = len(hist)
    if n <= levels:
        return n
    tail = _np.concatenate([_np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = sum(hist[i:])
    scores = {}

    def divergence(i):
        if i not in scores:
            p = hist[:i].copy()
            p[-1] += tail[i]
            scores[i] = _kl(p, _quantized(p, hist[:i], levels)) if p.sum() > 0 else _np.inf
        return scores[i]

    # Every STRIDE-th cut, then every cut around the best of those: a ResNet-18 took 46 s over all of them.
    coarse = min(list(range(levels, n + 1, STRIDE)) + [n], key=lambda i: (divergence(i), -i))
    fine = range(max(levels, coarse - STRIDE + 1), min(n, coarse + STRIDE - 1) + 1)
    return min(fine, key=lambda i: (divergence(i), -i))


def activation_params(lo, hi):
    """uint8 scale and zero point (asymmetric) covering [lo, hi] and 0, as float32 and uint8 scalars."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = _np.float32((hi - lo) / 255.0)
    if not scale > 0 or not _np.isfinite(scale):
        scale = _np.float32(1.0)  # a constant zero tensor: any scale represents it
    zp = _np.uint8(_np.clip(_np.round(-lo / float(scale)), 0, 255))
    return _np.array(scale, _np.float32), _np.array(zp, _np.uint8)


def weight_params(w, axis):
    """int8 symmetric scales of w per slice along `axis` (None: one for the whole tensor) and w quantized."""
    w = _np.asarray(w, _np.float32)
    if axis is None:
        amax = _np.array(_np.abs(w).max() if w.size else 0.0, _np.float32)
        bshape = ()
    else:
        others = tuple(a for a in range(w.ndim) if a != axis)
        amax = _np.abs(w).max(axis=others) if w.size else _np.zeros(w.shape[axis], _np.float32)
        bshape = [1] * w.ndim
        bshape[axis] = w.shape[axis]
    scale = (amax / 127.0).astype(_np.float32)
    scale = _np.where(scale > 0, scale, _np.float32(1.0 / 127.0)).astype(_np.float32)  # an all-zero channel
    q = _np.clip(_np.round(w / scale.reshape(bshape)), -127, 127).astype(_np.int8)
    return scale, q
