#!/usr/bin/python3
"""Whole models: kiln's graph compiler against ONNX Runtime and PyTorch at their best, side by side.

  bench/model_bench.py [--models resnet18,resnet50,mobilenet_v2,bert_layer] [--threads 1,2]
                       [--image-size 224] [--seq-len 128] [--repeat 7] [--repeat-ms 50] [--quick]
                       [--target llvm] [--db FILE] [--opset 14] [--json FILE] [--build DIR] [--strict]
                       [--peers ort,torch] [--batch 1]

Each (model, threads) row runs in a process of its own, with KILN_NUM_THREADS
set (kiln's thread pool reads it once per process). There the model (random
weights, seeded, eval mode, batch --batch, default 1) is exported to ONNX and compiled by kiln
for "TARGET -num-cores=T", its output checked once against PyTorch's, and kiln
is timed against ONNX Runtime on the same ONNX file (npm's onnxruntime-node,
CPU provider, all graph optimizations, intra-op threads = T, its default
spinning, driven by a Node worker; its output checked against PyTorch's) and
PyTorch's three ways of running it (eager NCHW, eager channels_last,
TorchScript frozen + optimize_for_inference), each a peer process in the
peers' clean environment, interleaved round by round (kiln, peer, peer, ...,
kiln, ...), each round at least --repeat-ms of back-to-back calls. The
fastest peer (lowest median) counts; the ratio is the median of the per-round
kiln/peer ratios, with their range: below 1 kiln is faster. kiln/ORT and
kiln/torch give the same against ONNX Runtime and PyTorch's fastest variant.

Memory: kiln's arena and peak are its memory plan's (exe.memory(): bytes of
the activation arena, and of the tensors live at once); PyTorch's peak is the
rise of a fresh process's peak RSS over its first inferences of the fastest
variant (bench/peers/torch_models.py, peak_memory), weights excluded on both
sides.

A model kiln cannot import or compile gets its error in its row, and its
peers are still timed; the exit status is 0 unless a row could not be made
at all (or, with --strict, kiln failed or was wrong).

--batch B: every side runs B images (sequences) a call: the ONNX file is
exported at batch B, kiln compiles it at B, ONNX Runtime runs the same file
and PyTorch's variants the same [B, ...] input; the table then adds each
side's throughput (images per second: B / median time per call).

--quick: image 64, 5 rounds. --json FILE: the rows (bench/scoreboard's format, times in ms).
"""
import argparse
import datetime
import io
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import blas_choice  # noqa: E402
import launcher  # noqa: E402
import ort_peer  # noqa: E402
import torch_models  # noqa: E402
from peer_timing import calls_per_repeat, time_calls, warm_up  # noqa: E402

DEFAULT_MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_layer")
MB = 1.0 / (1 << 20)


def _int_list(text, what):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} takes numbers separated by commas, got {text!r}")
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{what} takes numbers of at least 1, got {text!r}")
    return list(dict.fromkeys(vals))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="model_bench.py", description=__doc__.split("\n\n")[0])
    cores = os.cpu_count() or 1
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma-separated, of: {', '.join(torch_models.MODELS)}")
    ap.add_argument("--threads", type=lambda s: _int_list(s, "--threads"), default=list(dict.fromkeys([1, cores])),
                    help="thread counts, e.g. 1,2 (default: 1 and the cores)")
    ap.add_argument("--image-size", type=int, help="image side of the CNNs (default 224, --quick 64)")
    ap.add_argument("--seq-len", type=int, default=128, help="tokens of the BERT layer's input")
    ap.add_argument("--repeat", "--rounds", dest="repeat", type=int, help="interleaved rounds (default 7, --quick 5; at least 5)")
    ap.add_argument("--repeat-ms", type=float, default=50.0, help="milliseconds of back-to-back calls per round and side")
    ap.add_argument("--quick", action="store_true", help="image 64, 5 rounds")
    ap.add_argument("--target", default="llvm", help="kiln's target; -num-cores=T is added")
    ap.add_argument("--db", default=None, help="tuning database for kiln.compile (default schedules without)")
    ap.add_argument("--opset", type=int, default=14, help="ONNX opset of the export to kiln")
    ap.add_argument("--tol", type=float, default=1e-3, help="largest relative error of kiln's output against PyTorch's")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="kiln's build (its python/), where kiln is not importable")
    ap.add_argument("--strict", action="store_true", help="exit 1 when kiln fails on a model or its output is wrong")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one row may take")
    ap.add_argument("--peers", default="ort,torch", help="comma-separated peers: ort (ONNX Runtime), torch (PyTorch's variants)")
    ap.add_argument("--batch", type=int, default=1, help="images (BERT: sequences) per call; above 1 the table adds images/s")
    args = ap.parse_args(argv)
    args.peers = [p for p in args.peers.split(",") if p]
    if not args.peers or set(args.peers) - {"ort", "torch"}:
        ap.error(f"--peers takes ort and/or torch, got {args.peers}")
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in torch_models.MODELS]
    if unknown or not args.models:
        ap.error(f"unknown --models {unknown}; known: {', '.join(torch_models.MODELS)}")
    args.image_size = args.image_size or (64 if args.quick else 224)
    args.repeat = args.repeat or (5 if args.quick else 7)
    if args.image_size < 32 or args.seq_len < 1 or args.repeat < 1 or args.repeat_ms <= 0 or args.batch < 1:
        ap.error("--image-size must be at least 32 (ResNet downsamples 32x), --seq-len, --repeat, --repeat-ms and --batch positive")
    return args


# ---------------------------------------------------------------- the header

machine = blas_choice.machine


def torch_config():
    """PyTorch's version, the first lines of its parallel_info (threads, OpenMP, MKL, oneDNN) and its CPU capability."""
    import torch
    info = [line.strip() for line in torch.__config__.parallel_info().splitlines() if line.strip()]
    cap = [line.strip(" -") for line in torch.__config__.show().splitlines() if "CPU capability" in line]
    return {"version": torch.__version__, "parallel_info": info[:7], "capability": cap[0] if cap else "?"}


def header(args, m, tc):
    return [f"kiln model bench on {m['host']}: {m['cpu']}, {m['isa']} (avx2 {'yes' if m['avx2'] else 'no'}, "
            f"avx512f {'yes' if m['avx512f'] else 'no'}), {m['cores']} cores; {datetime.datetime.now():%Y-%m-%d %H:%M}"
            + (" (--quick)" if args.quick else ""),
            f"PyTorch {tc['version']}, {tc['capability']}; default config: " + "; ".join(tc["parallel_info"]),
            f"ONNX Runtime {ort_peer.version() or '(not installed: ' + str(ort_peer.unavailable()) + ')'}: onnxruntime-node's CPU "
            "provider, graph optimization all, intra-op threads T, default spinning, same ONNX file as kiln, warmed up",
            "peers: the fastest of ONNX Runtime and PyTorch eager NCHW / eager channels_last / TorchScript freeze+optimize_for_inference, "
            "each in its own process, torch.set_num_threads(T), OMP_NUM_THREADS=T, inference_mode/no_grad, warmed up",
            f"time per inference, batch {args.batch}, image {args.image_size}, BERT seq {args.seq_len}; {max(5, args.repeat)} interleaved rounds "
            f"of >= {args.repeat_ms:g} ms per side; kiln/peer = median of per-round ratios (range), below 1 kiln is faster",
            "memory: kiln arena / peak = exe.memory() arena_bytes / peak_bytes (planned activations); torch peak = "
            "rise of peak RSS (VmHWM) over 3 inferences of PyTorch's fastest variant in a fresh process, after building it"]


# ---------------------------------------------------------------- one row (in its own process)

def import_kiln(build):
    """kiln, from the path or else from this checkout's python/ and the build's python/."""
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(build, "python")]
        import kiln
    return kiln


def export_onnx(module, x, opset):
    """The module's ONNX file as bytes (input "input", output "output"): what kiln and ONNX Runtime both run."""
    import torch
    buf = io.BytesIO()
    # With gradients on, nn.TransformerEncoderLayer does not take its fused fast path, which ONNX cannot express.
    with torch.enable_grad():
        torch.onnx.export(module, (x,), buf, input_names=["input"], output_names=["output"], opset_version=opset)
    return buf.getvalue()


def kiln_model(kiln, module, x, onnx_bytes):
    """The module as a kiln graph: its ONNX export imported (from_torch where kiln has no from_onnx)."""
    if not hasattr(kiln.graph, "from_onnx"):
        if not hasattr(kiln.graph, "from_torch"):
            raise RuntimeError(f"this kiln ({os.path.dirname(kiln.__file__)}) has no model importer yet "
                               "(kiln.graph.from_onnx / from_torch)")
        return kiln.graph.from_torch(module, (x,))
    return kiln.graph.from_onnx(onnx_bytes, shapes={"input": tuple(x.shape)})


def kiln_side(args, threads, module, x, ref, onnx_bytes):
    """(run, facts) of the compiled model; raises what kiln raises."""
    kiln = import_kiln(args.build)
    t0 = time.perf_counter()
    model = kiln_model(kiln, module, x, onnx_bytes)
    import_s = time.perf_counter() - t0
    exe = kiln.compile(model, target=f"{args.target} -num-cores={threads}", db=args.db)
    xn = x.numpy()
    out = exe(xn)[0]
    same_shape = tuple(out.shape) == tuple(ref.shape)
    err = torch_models.rel_err(out, ref) if same_shape else float("inf")
    mem = exe.memory()
    facts = {"kiln_rel_err": err, "compile_s": exe.compile_seconds, "import_s": import_s, "num_kernels": exe.num_kernels,
             "kiln_arena_mb": mem["arena_bytes"] * MB, "kiln_peak_mb": mem["peak_bytes"] * MB,
             "kiln_naive_mb": mem["naive_bytes"] * MB, "kiln_weight_mb": mem["weight_bytes"] * MB,
             "kiln_module": os.path.dirname(kiln.__file__)}
    if not same_shape:
        facts["note"] = f"kiln's output is WRONG: shape {list(out.shape)}, PyTorch's {list(ref.shape)}"
    elif not err <= args.tol:  # NaN included
        facts["note"] = f"kiln's output is WRONG: relative error {err:.3g} > {args.tol:g}"
    return (lambda: exe(xn)), facts


def start_peers(args, model, threads, onnx_path, x, ref):
    """{impl: peer} of the --peers that started, and why the others did not."""
    peers, failed = {}, []
    if "ort" in args.peers:
        try:
            peers["ort"] = ort_peer.OrtPeer(onnx_path, {"input": x.numpy()}, ref, threads)
        except launcher.PeerError as e:
            failed.append(f"ort: {e}")
    for impl in torch_models.variants_of(model) if "torch" in args.peers else ():
        try:
            peers[impl] = torch_models.ModelPeer(impl, model, args.image_size, args.seq_len, threads, batch=args.batch)
        except launcher.PeerError as e:
            failed.append(f"{impl}: {e}")
    return peers, failed


def per_peer_ratios(row, peers):
    """kiln/ORT and kiln/torch (PyTorch's fastest variant) from the interleaved rounds' per-peer ratios."""
    stats = row.get("peers", {})
    ort = [p.label for impl, p in peers.items() if impl == "ort"]
    torch_labels = [p.label for impl, p in peers.items() if impl != "ort"]
    impl_of = {p.label: impl for impl, p in peers.items()}
    if ort and "ratio_median" in stats.get(ort[0], {}):
        row["ort_label"] = ort[0]
        row.update({f"ort_{k}": stats[ort[0]][k] for k in ("ratio_median", "ratio_min", "ratio_max", "median")})
    if torch_labels and "ratio_median" in stats.get(torch_labels[0], {}):
        best = min(torch_labels, key=lambda k: stats[k]["median"])
        row["torch_label"], row["torch_variant"] = best, impl_of[best]
        row.update({f"torch_{k}": stats[best][k] for k in ("ratio_median", "ratio_min", "ratio_max", "median")})


def bench_row(args, model, threads):
    """One table row: kiln (when it can) against the peers, interleaved; times in ms."""
    import torch
    torch.set_num_threads(1)  # torch here only exports and makes the reference: no OpenMP threads beside kiln's
    module, x = torch_models.build(model, args.image_size, args.seq_len, batch=args.batch)
    with torch.no_grad():
        ref = module(x).numpy()
    row = {"name": f"{model} {'x'.join(map(str, x.shape))}", "model": model, "threads": threads, "unit": "ms",
           "input_shape": list(x.shape), "kiln_threads_env": os.environ.get("KILN_NUM_THREADS")}
    onnx_bytes = export_onnx(module, x, args.opset)
    onnx_file = tempfile.NamedTemporaryFile(prefix=f"kiln_bench_{model}_", suffix=".onnx")
    onnx_file.write(onnx_bytes)
    onnx_file.flush()
    kiln_run = None
    try:
        run, facts = kiln_side(args, threads, module, x, ref, onnx_bytes)
        row.update(facts)
        number = calls_per_repeat(warm_up(run, 3, 0.3), args.repeat_ms * 1e-3)
        kiln_run = run
    except Exception as e:  # KilnError, an op the importer lacks, ...: the row says so, the peers still run
        row["kiln_error"] = f"{type(e).__name__}: {e}"
    print(f"model_bench: {row['name']} {threads}T: kiln {'ready' if kiln_run else 'failed: ' + row['kiln_error'][:200]}",
          file=sys.stderr, flush=True)
    if kiln_run:
        kiln_round = lambda: time_calls(kiln_run, 1, number)[0]  # noqa: E731
    else:
        kiln_round = lambda: float("nan")  # noqa: E731 (the peers are timed alone)
    peers, row["peers_failed"] = start_peers(args, model, threads, onnx_file.name, x, ref)
    try:
        if peers:
            row.update(timing_fields(launcher.interleave(kiln_round, list(peers.values()), args.repeat, args.repeat_ms), kiln_run))
            best = next(impl for impl, p in peers.items() if p.label == row["peer"])
            row["peer_variant"] = best
            row["peer_env"] = peers[best].env
            if kiln_run:
                per_peer_ratios(row, peers)
    except launcher.PeerError as e:  # a peer died between rounds: the row has no timing
        row["peers_failed"].append(f"while timing: {e}")
    finally:
        for p in peers.values():
            p.close()
        onnx_file.close()
    torch_variant = row.get("torch_variant") or (row.get("peer_variant") if row.get("peer_variant") != "ort" else None)
    if torch_variant:
        mem = torch_models.measure_peak_memory(torch_variant, model, args.image_size, args.seq_len, threads, batch=args.batch)
        row["torch_peak_mb"] = mem.get("growth_mb")
        row["torch_mem_method"] = mem.get("method") or mem.get("error")
    add_throughput(row, args.batch)
    return row


def add_throughput(row, batch):
    """Images (sequences) per second of each side timed: batch / median time per call (ms)."""
    row["batch"] = batch
    for side in ("kiln", "peer", "ort", "torch"):
        med = row.get(f"{side}_median")
        if med:
            row[f"{side}_images_per_s"] = batch / (med * 1e-3)


def timing_fields(s, kiln_ran):
    """launcher.summarize()'s dict in ms; without kiln, only the peers' fields."""
    ms = {k: v * 1e3 for k, v in s.items() if k in ("kiln_min", "kiln_median", "peer_min", "peer_median")}
    out = {"peer": s["peer"], "rounds": s["rounds"], **ms,
           "peers": {k: {**v, "min": v["min"] * 1e3, "median": v["median"] * 1e3} for k, v in s["peers"].items()}}
    if kiln_ran:
        out.update(ratio_median=s["ratio_median"], ratio_min=s["ratio_min"], ratio_max=s["ratio_max"])
    else:
        out.pop("kiln_min"), out.pop("kiln_median")
    return out


def child_main(spec_json):
    spec = json.loads(spec_json)
    args = argparse.Namespace(**spec["args"])
    row = bench_row(args, spec["model"], spec["threads"])
    with open(spec["out"], "w") as f:
        json.dump(row, f)
    return 0


def run_row(args, model, threads, tmp):
    """bench_row in a fresh process with KILN_NUM_THREADS=threads; a process that dies still gives a row."""
    out = os.path.join(tmp, f"{model}-{threads}.json")
    spec = {"model": model, "threads": threads, "out": out, "args": vars(args)}
    env = dict(os.environ, KILN_NUM_THREADS=str(threads))
    name = f"{model} {threads}T"
    print(f"== {name}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env, stdout=sys.stderr,
                              timeout=args.timeout)
        status = f"status {proc.returncode}"
    except subprocess.TimeoutExpired:
        status = f"timed out after {args.timeout:g} s"
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"name": model, "model": model, "threads": threads, "unit": "ms",
                "kiln_error": f"the benchmark process of this row failed ({status}); its log is above", "failed": True}


# ---------------------------------------------------------------- the table

def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def format_table(rows):
    fmt = "{:<26} {:>2} {:>9} {:>9} {:>9} {:>9}  {:<18} {:<18} {:<18} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8}  {}"
    lines = [fmt.format("model", "T", "kiln min", "kiln med", "peer min", "peer med", "kiln/peer (range)", "kiln/ORT (range)",
                        "kiln/torch (range)", "arena MB", "kiln pk", "torch pk", "max err", "kernels", "compile", "best peer")]

    def ratio(r, prefix):
        if r.get(prefix + "ratio_median") is None:
            return "-"
        return f"{r[prefix + 'ratio_median']:.2f} ({r[prefix + 'ratio_min']:.2f}..{r[prefix + 'ratio_max']:.2f})"
    for r in rows:
        comp = None if r.get("compile_s") is None else f"{r['compile_s']:.1f}s"
        peer = (r.get("peer") or "-").replace("optimize_for_inference", "opt")
        lines.append(fmt.format(r["name"][:26], r["threads"], _f(r.get("kiln_min"), ".2f"), _f(r.get("kiln_median"), ".2f"),
                                _f(r.get("peer_min"), ".2f"), _f(r.get("peer_median"), ".2f"), ratio(r, ""), ratio(r, "ort_"),
                                ratio(r, "torch_"), _f(r.get("kiln_arena_mb"), ".2f"),
                                _f(r.get("kiln_peak_mb"), ".2f"), _f(r.get("torch_peak_mb"), ".2f"), _f(r.get("kiln_rel_err"), ".1e"),
                                _f(r.get("num_kernels"), "d"), comp or "-", peer))
        if r.get("kiln_error"):
            lines[-1] += "   kiln FAILED: " + r["kiln_error"].splitlines()[0][:300]
        if r.get("note"):
            lines.append(" " * 4 + r["note"])
        for f in r.get("peers_failed", []):
            lines.append(" " * 4 + "peer did not run: " + f.splitlines()[0][:300])
    lines.append("times in ms per inference; memory in MB")
    if any(r.get("batch", 1) > 1 for r in rows):
        lines += throughput_table(rows)
    return "\n".join(lines)


def throughput_table(rows):
    """Lines of images (sequences) per second, from each side's median time; kiln/ORT and kiln/torch as above."""
    fmt = "{:<26} {:>2} {:>5} {:>10} {:>10} {:>10}  {}"
    lines = ["", "throughput, images (sequences) per second from the median time per call; higher is faster",
             fmt.format("model", "T", "batch", "kiln", "ORT", "torch", "kiln/ORT, kiln/torch (time ratio, as above)")]
    for r in rows:
        ratios = ", ".join("-" if r.get(p + "ratio_median") is None else f"{r[p + 'ratio_median']:.2f}" for p in ("ort_", "torch_"))
        lines.append(fmt.format(r["name"][:26], r["threads"], r.get("batch", 1), _f(r.get("kiln_images_per_s"), ".1f"),
                                _f(r.get("ort_images_per_s"), ".1f"), _f(r.get("torch_images_per_s"), ".1f"), ratios))
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--child":
        return child_main(argv[1])
    args = parse_args(argv)
    try:
        tc = torch_config()
    except ImportError:
        print("model_bench: PyTorch is not installed (import torch failed); it is the peer and exports the models", file=sys.stderr)
        return 2
    m = machine()
    head = header(args, m, tc)
    print("\n".join(head), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln_model_bench_") as tmp:
        for model in args.models:
            for t in args.threads:
                rows.append(run_row(args, model, t, tmp))
    print(format_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": m, "torch": tc, "header": head, "args": vars(args), "rows": rows}, f, indent=1)
        print(f"written: {args.json}")
    if any(r.get("failed") for r in rows):
        return 1
    if args.strict and any(r.get("kiln_error") or r.get("note") for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
