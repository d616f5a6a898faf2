"""kiln-compile: compile an ONNX model into a shared library that kiln_runtime runs alone.

    kiln-compile model.onnx -o model.so [--shape input=1x3x224x224] [--db FILE] [--target T] [--weights embed|beside]

The library holds the kernels, the executor's plan and the weights (inside
it, or beside it as model.so.weights with --weights beside). Load it with
kiln.runtime.load_model("model.so"), kiln::ModelRunner::load, the C API, or
run it with `kiln-run model.so`.
"""
import argparse
import os
import sys
import time

from .run_model import parse_shapes


def main(argv=None):
    ap = argparse.ArgumentParser(prog="kiln-compile", description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="an ONNX file")
    ap.add_argument("-o", "--output", required=True, help="the shared library to write (e.g. model.so)")
    ap.add_argument("--shape", action="append", metavar="NAME=D0xD1x...", help="an input's shape (for dynamic dimensions, or to override)")
    ap.add_argument("--db", default=None, help="tuning database: groups take their workload's best record")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--weights", choices=["embed", "beside"], default="embed", help="weights inside the library (default) or in OUTPUT.weights")
    args = ap.parse_args(argv)
    import kiln

    if not os.path.exists(args.model):
        raise SystemExit(f"kiln-compile: no such file: {args.model}")
    try:
        t0 = time.perf_counter()
        model = kiln.graph.from_onnx(args.model, shapes=parse_shapes(args.shape))
        exe = kiln.compile(model, target=args.target, db=args.db, quiet=True)
        t1 = time.perf_counter()
        exe.export_library(args.output, weights=args.weights)
        t2 = time.perf_counter()
    except kiln.KilnError as e:
        print(f"kiln-compile: {e}", file=sys.stderr)
        return 2
    groups = exe.groups()
    tuned = sum(1 for g in groups if g["schedule"] == "database")
    size = os.path.getsize(args.output) / 2**20
    print(f"kiln-compile: {args.model} -> {args.output} ({size:.1f} MB{', weights beside' if args.weights == 'beside' else ''})")
    print(f"  {len(model.op_types())} operators -> {len(groups)} fused groups ({exe.num_kernels} kernels; {tuned} from the tuning DB); "
          f"compile {t1 - t0:.1f} s, export {t2 - t1:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
