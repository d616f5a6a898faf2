"""The shape options of a model with symbolic dimensions, as kiln.compile and kiln.tune_model take them."""
from .._ffi import KilnError


def parse_dims(dims):
    """dims=: shape variable -> (lo, hi), the inclusive range of sizes a call may give it."""
    if dims is None:
        return {}
    if not isinstance(dims, dict):
        raise KilnError(f"dims= takes a dict of shape variable -> (lo, hi), got a {type(dims).__name__}")
    out = {}
    for name, r in dims.items():
        try:
            lo, hi = (int(v) for v in r)
        except (TypeError, ValueError):
            raise KilnError(f"dims['{name}'] must be a (lo, hi) pair of ints, got {r!r}") from None
        out[str(name)] = (lo, hi)
    return out


def parse_sizes(sizes):
    """sizes=: shape variable -> the sizes calls will most likely have, most likely first (an int for one)."""
    if sizes is None:
        return {}
    if not isinstance(sizes, dict):
        raise KilnError(f"sizes= takes a dict of shape variable -> likely sizes, got a {type(sizes).__name__}")
    out = {}
    for name, values in sizes.items():
        values = [values] if isinstance(values, int) else list(values)
        if not values or not all(isinstance(v, int) and v >= 1 for v in values):
            raise KilnError(f"sizes['{name}'] must be a size or a list of sizes (ints >= 1), most likely first; got {values!r}")
        out[str(name)] = values
    return out
