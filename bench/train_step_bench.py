#!/usr/bin/python3
"""Training steps: kiln.train's compiled step against PyTorch's eager training step, side by side.

  bench/train_step_bench.py [--workloads resnet18,bert[,mobilenetv2]] [--threads 2] [--repeat 5] [--batch 8]
                            [--image-size 112] [--seq-len 128] [--json FILE] [--build DIR] [--timeout 1800]
                            [--db FILE [--tune-trials N]] [--precision bfloat16] [--target T] [--isa avx2]
                            [--clock-ghz GHZ] [--fma-units 2]

One training step is forward + loss + backward + torch.optim.SGD's update
with momentum (lr 0.01, momentum 0.9), on one fixed batch:

  resnet18   torchvision's ResNet-18 (10 classes; batch norms in training
             mode), [batch, 3, S, S] images, cross-entropy loss
  mobilenetv2  torchvision's MobileNetV2 (10 classes, dropout 0; batch norms in
             training mode; its depthwise convolutions' gradients), [batch,
             3, S, S] images (--image-size), cross-entropy loss
  bert       one BERT-base encoder layer: nn.TransformerEncoderLayer(768,
             12 heads, FFN 3072, GELU, post-LayerNorm, dropout 0,
             batch_first), [batch, L, 768] input, MSE loss against a random
             target of the output's shape

Each side runs in a fresh process of its own: kiln (KILN_NUM_THREADS=T,
target "llvm -num-cores=T"; the model exported by kiln.train.from_torch and
compiled by kiln.train.compile) and PyTorch (torch.set_num_threads(T),
OMP/OpenBLAS/MKL threads T, the peers' clean environment of bench/peers).
Both start from the same seeded weights and batch, so their first losses
must agree (printed). Each process is started and takes its 3 warm-up
steps alone (the other waits); then --repeat rounds time one step of each,
alternating, so that a busy machine slows both alike: min and median;
kiln/torch = ratio of the medians, below 1 kiln is faster. The timed steps
go on training (the weights change; the work per step does not). Each step's
CPU time (process_time, all the process's threads) is printed below its row
too: on a loaded machine it moves less with the other processes than the
wall time (with 1 thread; with more, spinning threads count).

With --db, kiln's step is compiled with the tuning records of that
database (kiln.train.compile(db=)); with --tune-trials N as well, the kiln
process first tunes the step's groups into it (kiln.tune_model on the
step's graph, N trials, resumed from what the database holds), alone,
before either side is timed. The table then says "tuned" and the seconds.

With --isa avx2, both sides are held to AVX2 on any host (an AVX2-only CPU,
such as AMD Zen 3, on an AVX-512 one): kiln compiles for --target (default
'llvm -mcpu=znver3'), and every library PyTorch computes with is limited
(bench/peers/isa_limits.py: ATEN_CPU_CAPABILITY=avx2 for ATen's kernels,
DNNL_MAX_CPU_ISA=AVX2 for oneDNN's convolutions, OPENBLAS_CORETYPE=Haswell
for OpenBLAS's matmuls; limiting oneDNN alone leaves the matmuls on AVX-512).
Before timing, a probe in the peer's environment checks that each limit took
(OpenBLAS's core type, oneDNN's convolution kernels, a matmul's GFLOP/s
against one core's AVX2 peak); the bench stops if one did not. The table's
header prints the probe's findings, limited and not.

With --precision bfloat16, both sides train in mixed precision: kiln with
kiln.train.compile(precision="bfloat16") (its matmuls as bfloat16 dot
products, vdpbf16ps, where the CPU has AVX-512 BF16 and they beat FMAs;
on Intel cores without AMX as FMAs of the rounded operands), PyTorch with its CPU
autocast (torch.autocast("cpu", dtype=torch.bfloat16) around forward and
loss, its documented way; oneDNN's bfloat16 kernels where the CPU has them).
Both keep float32 master weights.

Each row's rate: the step's FLOPs (bench/step_flops.py: the products of
PyTorch's convolutions and matrix products in forward and backward, counted
at batch 2 and scaled by --batch / 2) over each side's median step, in GFLOP/s
and as a share of the FMA peak of the threads used: T cores x --fma-units
(2) x float32 lanes of the ISA timed (16 AVX-512, 8 AVX2) x 2 x --clock-ghz
(default: the clock /proc/cpuinfo reports, a VM's base clock; turbo runs
above it, so give the measured one where known).

Memory, weights excluded on both sides:
  kiln arena / planned peak  the compiled step's memory plan (exe.memory():
                             arena_bytes, peak_bytes), the activations and
                             gradients between the kernels; the parameters,
                             optimizer state and step outputs are not in it
  RSS rise (both sides)      how far the process's peak RSS (VmHWM, reset to
                             VmRSS through /proc/self/clear_refs) rises over
                             the 3 warm-up steps, from just after the model,
                             optimizer (and, for kiln, the compiled step) are
                             built: activations, gradients, momentum buffers,
                             new parameters and each library's scratch
"""
import argparse
import datetime
import gc
import json
import os
import resource
import select
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "peers"))
import blas_choice  # noqa: E402
import step_flops  # noqa: E402
import isa_limits  # noqa: E402
from peer_env import clean_env  # noqa: E402
from torch_models import _status_kb  # noqa: E402  (a /proc/self/status field in kB)

WORKLOADS = ("resnet18", "bert", "mobilenetv2")
DEFAULT_WORKLOADS = ("resnet18", "bert")  # MobileNetV2 on request: its step compiles for minutes
WARMUP = 3
LR, MOMENTUM = 0.01, 0.9
MB = 1.0 / (1 << 20)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="train_step_bench.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS), help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    ap.add_argument("--threads", type=int, default=2, help="threads of each side (default 2)")
    ap.add_argument("--repeat", type=int, default=5, help="timed steps per side, after 3 warm-up steps (default 5)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=112, help="ResNet-18's and MobileNetV2's image side")
    ap.add_argument("--seq-len", type=int, default=128, help="tokens of the BERT layer's input")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="kiln's build (its python/), where kiln is not importable")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds one side may take to start (or one step)")
    ap.add_argument("--db", help="compile kiln's step with this tuning database's records")
    ap.add_argument("--tune-trials", type=int, default=0, help="with --db: first tune the step's groups into it (trials)")
    ap.add_argument("--target", default=None,
                    help="kiln's target (default 'llvm', with --isa avx2 'llvm -mcpu=znver3'); -num-cores=T is added")
    ap.add_argument("--isa", choices=("host", "avx2"), default="host",
                    help="avx2: kiln built for AVX2 and PyTorch's libraries (ATen, oneDNN, OpenBLAS) limited to AVX2, checked")
    ap.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                    help="bfloat16: mixed precision on both sides (kiln precision=, PyTorch CPU autocast)")
    ap.add_argument("--clock-ghz", type=float, default=None,
                    help="the clock of the FMA peak the GFLOP/s are set against (default: /proc/cpuinfo's cpu MHz)")
    ap.add_argument("--fma-units", type=int, default=2, help="FMA instructions a core issues per cycle, for the peak (default 2)")
    args = ap.parse_args(argv)
    args.workloads = [w for w in args.workloads.split(",") if w]
    if args.target is None:
        args.target = "llvm -mcpu=znver3" if args.isa == "avx2" else "llvm"
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown or not args.workloads:
        ap.error(f"unknown --workloads {unknown}; known: {', '.join(WORKLOADS)}")
    if args.tune_trials and not args.db:
        ap.error("--tune-trials needs --db (the database the records go to)")
    if args.tune_trials < 0:
        ap.error("--tune-trials must be 0 or more")
    if args.clock_ghz is None:
        args.clock_ghz = isa_limits.cpu_ghz()
    if (args.clock_ghz is not None and args.clock_ghz <= 0) or args.fma_units < 1:
        ap.error("--clock-ghz must be positive and --fma-units at least 1")
    if args.threads < 1 or args.repeat < 1 or args.batch < 1 or args.seq_len < 1 or args.image_size < 32:
        ap.error("--threads, --repeat, --batch and --seq-len must be positive, --image-size at least 32 (ResNet downsamples 32x)")
    return args


# ---------------------------------------------------------------- the workloads

def build(name, batch, image_size, seq_len, seed=0):
    """(module in train mode, input, target, loss name): the same in every process for a seed."""
    import torch
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if name == "resnet18":
        import torchvision
        module = torchvision.models.resnet18(weights=None, num_classes=10)
        x = torch.randn(batch, 3, image_size, image_size, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        return module.train(), x, y, "cross_entropy"
    if name == "mobilenetv2":
        import torchvision
        module = torchvision.models.mobilenet_v2(weights=None, num_classes=10, dropout=0.0)  # no randomness: first losses agree
        x = torch.randn(batch, 3, image_size, image_size, generator=gen)
        y = torch.randint(0, 10, (batch,), generator=gen)
        return module.train(), x, y, "cross_entropy"
    if name == "bert":
        module = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.0, activation="gelu",
                                                  batch_first=True)
        x = torch.randn(batch, seq_len, 768, generator=gen)
        y = torch.randn(batch, seq_len, 768, generator=gen)
        return module.train(), x, y, "mse"
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")


# ---------------------------------------------------------------- memory



class RssRise:
    """Peak RSS rise over a stretch of code: VmHWM reset to VmRSS at start (Linux >= 4.0), else ru_maxrss (a lower bound)."""

    def start(self):
        gc.collect()
        self.base_kb = _status_kb("VmRSS")
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.hwm = True
        except OSError:
            self.hwm = False
            self.base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def stop_mb(self):
        peak = _status_kb("VmHWM") if self.hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return max(0, peak - self.base_kb) / 1024.0

    def method(self):
        return "VmHWM rise (reset by clear_refs)" if self.hwm else "ru_maxrss rise (lower bound: the setup's peak hides part)"


def warm_up(step):
    """The WARMUP first steps, measured for memory: first loss, its seconds, the RSS rise."""
    rss = RssRise()
    rss.start()
    t0 = time.perf_counter()
    first = step()
    first_s = time.perf_counter() - t0
    for _ in range(WARMUP - 1):
        step()
    return {"loss1": first, "first_step_s": first_s, "rss_rise_mb": rss.stop_mb(), "rss_method": rss.method()}


# ---------------------------------------------------------------- each side (in its own process)

def torch_side(spec):
    """(step, facts): PyTorch's eager training step."""
    import torch
    torch.set_num_threads(spec["threads"])
    module, x, y, loss = build(spec["workload"], spec["batch"], spec["image_size"], spec["seq_len"])
    loss_fn = torch.nn.functional.cross_entropy if loss == "cross_entropy" else torch.nn.functional.mse_loss
    opt = torch.optim.SGD(module.parameters(), lr=LR, momentum=MOMENTUM)
    low = spec.get("precision") == "bfloat16"

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            out = loss_fn(module(x), y)
        out.backward()
        opt.step()
        return out.item()

    info = [line.strip() for line in torch.__config__.parallel_info().splitlines() if line.strip()]
    cap = [line.strip(" -") for line in torch.__config__.show().splitlines() if "CPU capability" in line]
    setup = (f"PyTorch {torch.__version__} eager{' with CPU autocast bfloat16' if low else ''}, {cap[0] if cap else '?'}, "
             f"mkldnn bf16 {'yes' if torch.backends.mkldnn.is_available() else 'no'}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
             f"{isa_limits.describe(os.environ)}; " + "; ".join(info[:6]))
    return step, {"setup": setup}


def import_kiln(build_dir):
    try:
        import kiln
    except ImportError:
        sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(build_dir, "python")]
        import kiln
    return kiln


def kiln_side(spec):
    """(step, facts): kiln's compiled training step."""
    kiln = import_kiln(spec["build"])
    module, x, y, loss = build(spec["workload"], spec["batch"], spec["image_size"], spec["seq_len"])
    xn, yn = x.numpy(), y.numpy()
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # the ONNX exporter's notes on num_batches_tracked
        warnings.simplefilter("ignore")
        model = kiln.train.from_torch(module, xn)
    import_s = time.perf_counter() - t0
    target = f"{spec.get('target', 'llvm')} -num-cores={spec['threads']}"
    optimizer = kiln.train.SGD(lr=LR, momentum=MOMENTUM)
    precision = "bfloat16" if spec.get("precision") == "bfloat16" else None
    tuned = {}
    if spec.get("db") and spec.get("tune_trials"):
        t0 = time.perf_counter()
        plain = kiln.train.compile(model, loss=loss, optimizer=optimizer, target=target, precision=precision)
        r = kiln.tune_model(plain.graph, target=target, trials=spec["tune_trials"], db=spec["db"], progress=False)
        tuned = {"tune_s": time.perf_counter() - t0, "tune_trials": r["trials"]}
    t0 = time.perf_counter()
    step = kiln.train.compile(model, loss=loss, optimizer=optimizer, target=target, db=spec.get("db"), precision=precision)
    compile_s = time.perf_counter() - t0
    mem = step._exe.memory()
    groups = step._exe.groups()
    tuned["tuned_groups"] = sum(1 for g in groups if g["schedule"] == "database")
    tuned["groups"] = len(groups)
    tuned["bf16_dot_groups"] = sum(1 for g in groups if "BF16Pairs" in g["ops"])
    return (lambda: step(xn, yn)), {**tuned, "import_s": import_s, "compile_s": compile_s, "num_kernels": step._exe.num_kernels,
                                    "arena_mb": mem["arena_bytes"] * MB, "planned_peak_mb": mem["peak_bytes"] * MB,
                                    "params": len(step.parameters), "kiln_module": os.path.dirname(kiln.__file__)}


def child_main(spec_json):
    """Builds one side, warms it up, says {"ready": ...} on stdout, then times one step per "step" line of stdin."""
    spec = json.loads(spec_json)
    out = sys.stdout
    sys.stdout = sys.stderr  # the libraries' prints stay off the protocol
    try:
        step, facts = (kiln_side if spec["side"] == "kiln" else torch_side)(spec)
        facts.update(warm_up(step))
        facts["ready"] = True
    except Exception as e:  # an op without a gradient, a compile error ...: the table says so
        import traceback
        traceback.print_exc()
        step, facts = None, {"ready": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(facts), file=out, flush=True)
    for line in sys.stdin:
        if line.strip() != "step" or step is None:
            break
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        print(json.dumps({"t": time.perf_counter() - t0, "cpu": time.process_time() - c0}), file=out, flush=True)
    return 0


class Side:
    """One side's process: started, warmed up, then asked for one timed step at a time."""

    def __init__(self, args, side, workload):
        spec = {"side": side, "workload": workload, "threads": args.threads, "batch": args.batch, "image_size": args.image_size,
                "seq_len": args.seq_len, "build": args.build, "db": args.db and os.path.abspath(args.db), "tune_trials": args.tune_trials,
                "precision": args.precision, "target": args.target}
        if side == "kiln":
            env = dict(os.environ, KILN_NUM_THREADS=str(args.threads))
        else:
            env = peer_env(args)
            env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
        print(f"== {workload}: {side}", file=sys.stderr, flush=True)
        self.name, self.timeout = side, args.timeout
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr, text=True, bufsize=1)
        t0 = time.perf_counter()
        self.facts = self._read() or {"ready": False, "error": f"the {side} process died while starting (status {self.proc.poll()}); its log is above"}
        self.facts["start_s"] = time.perf_counter() - t0
        self.facts["times"], self.facts["cpu_times"] = [], []

    def _read(self):
        # One line per request, so nothing waits in the pipe's buffer and select sees what readline would.
        if not select.select([self.proc.stdout], [], [], self.timeout)[0]:
            self.proc.kill()
            return {"ready": False, "error": f"the {self.name} process gave no answer in {self.timeout:g} s (--timeout); killed"}
        line = self.proc.stdout.readline()
        try:
            return json.loads(line)
        except ValueError:
            return None

    def time_one(self):
        if not self.facts.get("ready"):
            return
        self.proc.stdin.write("step\n")
        got = self._read()
        if got is None or "t" not in got:
            self.facts.update(ready=False, error=f"the {self.name} process died while timing (status {self.proc.poll()})")
        else:
            self.facts["times"].append(got["t"])
            self.facts["cpu_times"].append(got.get("cpu"))

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def peer_env(args):
    """PyTorch's environment: the peers' clean one, with OpenBLAS's best core type, or every library limited to AVX2."""
    if args.isa == "avx2":
        return isa_limits.limited_env(clean_env(args.threads))
    return clean_env(args.threads, blas=blas_choice.choose(args.threads))


def isa_check(args):
    """(ok, lines): with --isa avx2, what PyTorch's libraries run in the peer's environment, limited and not."""
    if args.isa != "avx2":
        return True, []
    ok, lines = True, []
    for name, env, limited in (("unlimited", clean_env(1), False), ("AVX2-limited (timed)", peer_env(args), True)):
        good, line = isa_limits.verdict(isa_limits.check(env), limited)
        ok &= good
        lines.append(f"peer ISA check, {name}, {isa_limits.describe(env)}: {line}")
    return ok, lines


def run_workload(args, workload):
    """Both sides started one after the other (so each warms up alone), then timed in alternating rounds."""
    sides = []
    try:
        for name in ("kiln", "torch"):
            sides.append(Side(args, name, workload))
        for _ in range(args.repeat):
            for s in sides:
                s.time_one()
    finally:
        for s in sides:
            s.close()
    return {"workload": workload, "threads": args.threads, "precision": args.precision, **rate_facts(args, workload),
            **{s.name: s.facts for s in sides}}


def rate_facts(args, workload):
    """The step's FLOPs (counted on PyTorch's step at batch 2, times --batch / 2: every product scales with the batch;
    batch norm in training mode needs 2 values a channel after ResNet's 32x downsampling) and the FMA peak."""
    import torch.nn.functional as F
    module, x, y, loss = build(workload, 2, args.image_size, args.seq_len)
    flops = step_flops.step_flops(module, x, y, F.cross_entropy if loss == "cross_entropy" else F.mse_loss) * args.batch / 2
    lanes = 8 if args.isa == "avx2" or not machine()["avx512f"] else 16
    peak = step_flops.fma_peak(args.threads, lanes, args.clock_ghz, args.fma_units) if args.clock_ghz else None
    return {"step_gflop": flops / 1e9, "peak_gflops": peak, "peak_lanes": lanes}


# ---------------------------------------------------------------- the table

machine = blas_choice.machine


def header(args, m):
    import torch
    shapes = {"resnet18": f"ResNet-18 [{args.batch}, 3, {args.image_size}, {args.image_size}] -> 10 classes, cross-entropy",
              "mobilenetv2": f"MobileNetV2 [{args.batch}, 3, {args.image_size}, {args.image_size}] -> 10 classes, cross-entropy",
              "bert": f"BERT-base encoder layer [{args.batch}, {args.seq_len}, 768], MSE"}
    return [f"kiln training-step bench on {m['host']}: {m['cpu']}, {m['isa']} (avx2 {'yes' if m['avx2'] else 'no'}, "
            f"avx512f {'yes' if m['avx512f'] else 'no'}), {m['cores']} cores; {datetime.datetime.now():%Y-%m-%d %H:%M}",
            f"peer: PyTorch {torch.__version__} eager training step (zero_grad, forward, loss, backward, SGD step) in train mode, "
            f"torch.set_num_threads({args.threads}), OMP_NUM_THREADS={args.threads}, the peers' clean environment (its own report below the table)",
            (f"ISA: AVX2 on both sides (kiln's target {args.target!r}; PyTorch's libraries limited: "
             f"{isa_limits.describe(isa_limits.AVX2_ENV)})" if args.isa == "avx2" else "ISA: each side's own choice for this host"),
            f"kiln: kiln.train.from_torch + kiln.train.compile, target {args.target} -num-cores={args.threads}, KILN_NUM_THREADS={args.threads}, "
            + (f"schedules from {args.db}" + (f" after tuning the step {args.tune_trials} trials into it" if args.tune_trials else "")
               if args.db else "default schedules (no tuning database)"),
            (f"precision: bfloat16 mixed precision on both sides (kiln precision='bfloat16'; PyTorch torch.autocast('cpu', "
             "dtype=torch.bfloat16) around forward and loss); float32 master weights" if args.precision == "bfloat16" else "precision: float32"),
            f"step = forward + backward + SGD(lr {LR}, momentum {MOMENTUM}); workloads: " + "; ".join(shapes[w] for w in args.workloads),
            f"each side in a fresh process, started and warmed up ({WARMUP} steps) alone; then {args.repeat} rounds of one timed step "
            "per side, alternating; kiln/torch = ratio of medians, below 1 kiln is faster",
            (f"rate: the step's products (convolutions, matrix products; forward and backward) over the median step; FMA peak = "
             f"{args.threads} cores x {args.fma_units} FMA x {16 if m['avx512f'] and args.isa != 'avx2' else 8} float32 lanes x 2 x "
             + (f"{args.clock_ghz:.2f} GHz" if args.clock_ghz else "? GHz (give --clock-ghz)")),
            "memory (weights excluded): kiln arena / plan pk = exe.memory() arena_bytes / peak_bytes of the compiled step; "
            f"RSS rise = peak RSS rise over the {WARMUP} warm-up steps from after building (VmHWM reset by clear_refs), same method both sides"]


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def share_of(rate, peak):
    return f" ({rate / peak * 100:.1f}% of peak)" if peak else ""


def format_table(rows):
    fmt = "{:<9} {:>2} {:>9} {:>9} {:>9} {:>9} {:>6}  {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}"
    lines = [fmt.format("workload", "T", "kiln min", "kiln med", "torch min", "torch med", "ratio", "compile", "1st step", "arena MB",
                        "plan pk", "kiln RSS", "torch RSS", "loss1 kiln", "loss1 torch")]
    for r in rows:
        k, t = r["kiln"], r["torch"]
        kt, tt = k.get("times"), t.get("times")
        ratio = statistics.median(kt) / statistics.median(tt) if kt and tt else None
        ms = lambda v: None if not v else min(v) * 1e3  # noqa: E731
        med = lambda v: None if not v else statistics.median(v) * 1e3  # noqa: E731
        lines.append(fmt.format(r["workload"], r["threads"], _f(ms(kt), ".1f"), _f(med(kt), ".1f"), _f(ms(tt), ".1f"), _f(med(tt), ".1f"),
                                _f(ratio, ".2f"), _f(k.get("compile_s"), ".1f") + ("s" if k.get("compile_s") is not None else ""),
                                _f(k.get("first_step_s"), ".1f") + ("s" if k.get("first_step_s") is not None else ""),
                                _f(k.get("arena_mb"), ".1f"), _f(k.get("planned_peak_mb"), ".1f"), _f(k.get("rss_rise_mb"), ".1f"),
                                _f(t.get("rss_rise_mb"), ".1f"), _f(k.get("loss1"), ".6f"), _f(t.get("loss1"), ".6f")))
        if k.get("loss1") is not None and t.get("loss1") is not None:
            rel = abs(k["loss1"] - t["loss1"]) / max(abs(t["loss1"]), 1e-30)
            if r.get("precision") == "bfloat16":
                lines.append(f"    the first losses differ by {rel:.1e} relative (same weights and batch; each side rounds to bfloat16 "
                             "in its own places: PyTorch's autocast also runs other ops, such as its linear layers' bias adds, in bfloat16)")
            elif rel > 1e-5:
                lines.append(f"    the first losses differ by {rel:.1e} relative (same weights and batch: float32 rounding "
                             "of the forward pass and of the loss's sum)")
        kc, tc = [v for v in k.get("cpu_times") or [] if v is not None], [v for v in t.get("cpu_times") or [] if v is not None]
        if kc and tc:
            lines.append(f"    CPU time (process_time, all threads; less sensitive to other processes' load): kiln {min(kc) * 1e3:.1f} / "
                         f"{statistics.median(kc) * 1e3:.1f}, torch {min(tc) * 1e3:.1f} / {statistics.median(tc) * 1e3:.1f} ms (min / median), "
                         f"ratio of medians {statistics.median(kc) / statistics.median(tc):.2f}")
        if r.get("step_gflop") and kt and tt:
            rate = lambda v: r["step_gflop"] / statistics.median(v)  # noqa: E731
            pk = r.get("peak_gflops")
            share = lambda v: f" ({rate(v) / pk * 100:.1f}% of peak)" if pk else ""  # noqa: E731
            lines.append(f"    rate at the medians: {r['step_gflop']:.2f} GFLOP per step; kiln {rate(kt):.1f} GFLOP/s{share(kt)}, "
                         f"torch {rate(tt):.1f} GFLOP/s{share(tt)}"
                         + (f"; FMA peak {pk:.1f} GFLOP/s" if pk else ""))
            if kc and tc:  # on a loaded host: the CPU time spread over the threads, as if each had a core
                cpu_rate = lambda v: r["step_gflop"] / (statistics.median(v) / r["threads"])  # noqa: E731
                lines.append(f"    rate by CPU time (median CPU time / {r['threads']} threads): kiln {cpu_rate(kc):.1f} GFLOP/s{share_of(cpu_rate(kc), pk)}, "
                             f"torch {cpu_rate(tc):.1f} GFLOP/s{share_of(cpu_rate(tc), pk)}")
        if k.get("bf16_dot_groups"):
            lines.append(f"    {r['workload']}: {k['bf16_dot_groups']} groups are bfloat16 dot products (kiln.*BF16Pairs)")
        if k.get("tune_s") is not None:
            lines.append(f"    {r['workload']}: tuned {k['tune_trials']} trials in {k['tune_s']:.0f} s; "
                         f"{k.get('tuned_groups')} of {k.get('groups')} groups from the database")
        elif k.get("groups") and k.get("tuned_groups"):
            lines.append(f"    {r['workload']}: {k['tuned_groups']} of {k['groups']} groups from the database")
        for side in ("kiln", "torch"):
            if r[side].get("error"):
                lines.append(f"    {side} FAILED: " + r[side]["error"].splitlines()[0][:400])
    lines.append("times in ms per training step; memory in MB; compile = kiln.train.compile's seconds, 1st step = kiln's first step "
                 "(its one-time work included)")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--child":
        return child_main(argv[1])
    args = parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("train_step_bench: PyTorch is not installed (import torch failed); it is the peer and exports the models", file=sys.stderr)
        return 2
    m = machine()
    head = header(args, m)
    ok, checked = isa_check(args)
    head += checked
    print("\n".join(head), flush=True)
    if not ok:
        print("train_step_bench: --isa avx2, but a library of PyTorch's still runs wider kernels (above); not timing", file=sys.stderr)
        return 1
    rows = []
    for w in args.workloads:
        rows.append(run_workload(args, w))
    print(format_table(rows), flush=True)
    for r in rows:
        if r["torch"].get("setup"):
            print(f"peer setup ({r['workload']}, as its process reports it): {r['torch']['setup']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": m, "header": head, "args": vars(args), "rows": rows}, f, indent=1)
        print(f"written: {args.json}")
    return 1 if any(r[s].get("error") for r in rows for s in ("kiln", "torch")) else 0


if __name__ == "__main__":
    sys.exit(main())
