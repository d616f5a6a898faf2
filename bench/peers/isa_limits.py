"""An AVX2 peer on an AVX-512 host: every library PyTorch computes with, limited to AVX2, and a check that each limit took.

Debian's PyTorch 1.13 computes with three libraries, each picking its
kernels from the CPU on its own:

  ATen's own kernels (elementwise, reductions, softmax, layer norm)
      ATEN_CPU_CAPABILITY=avx2
  oneDNN (libdnnl 2.6: convolutions and their gradients, batch norm, pooling)
      DNNL_MAX_CPU_ISA=AVX2
  BLAS for matmul / linear / bmm (BLAS_INFO=generic: libblas.so.3, which is
  OpenBLAS 0.3.21 with DYNAMIC_ARCH; no MKL is loaded)
      OPENBLAS_CORETYPE=Haswell
      (MKL_ENABLE_INSTRUCTIONS=AVX2 is set too, for a PyTorch that loads MKL)

Limiting only oneDNN leaves the matmuls on OpenBLAS's SkylakeX (AVX-512)
kernels. check() runs a probe in a fresh process with a given environment:
the BLAS core type threadpoolctl reports, a 1024^3 matmul's GFLOP/s on one
thread, ATen's reported CPU capability, and the implementation oneDNN's
verbose log names for a convolution's forward and both gradients. With the
limits, none may name AVX-512 or AMX. The matmul's rate is printed against
one core's AVX2 peak (2 FMA x 8 lanes x 2 flops per cycle) at the clock
/proc/cpuinfo gives, with the clock the rate implies: a VM reports its base
clock while the core turbos (OpenBLAS's Haswell kernels ran 106 GFLOP/s, 3.3
GHz x 32, on the 2.6 GHz Xeon of 2026-12-07), so the rate alone proves
nothing and the kernels' names are the check.

  isa_limits.py [THREADS]    prints the check with and without the limits
"""
import json
import os
import subprocess
import sys
import time

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
AVX2_FLOPS_PER_CYCLE = 2 * 8 * 2  # two FMA ports x 8 fp32 lanes x 2 flops
WIDE = ("avx512", "amx", "skylakex", "cooperlake", "sapphirerapids")  # names of kernels wider than AVX2


def limited_env(env):
    """env with every library limited to AVX2 (the variables above override what env had)."""
    return dict(env, **AVX2_ENV)


def describe(env):
    return ", ".join(f"{k}={env.get(k, '-')}" for k in AVX2_ENV)


def cpu_ghz():
    """The host's nominal clock from /proc/cpuinfo (a VM reports no turbo), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1]) / 1000.0
    except (OSError, ValueError):
        pass
    return None


def _probe():
    """(In the child.) Times and names what each library runs; prints one JSON line on fd 1 after oneDNN's log."""
    import torch
    from threadpoolctl import threadpool_info
    torch.set_num_threads(1)
    cap = [line.strip(" -") for line in torch.__config__.show().splitlines() if "CPU capability" in line]
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    x = torch.randn(2, 64, 28, 28, requires_grad=True)
    w = torch.randn(64, 64, 3, 3, requires_grad=True)
    torch.nn.functional.conv2d(x, w, padding=1).sum().backward()
    blas = next((d for d in threadpool_info() if d.get("user_api") == "blas"), {})
    sys.stdout.flush()
    print(json.dumps({"aten": cap[0] if cap else "?", "blas": f"{blas.get('internal_api')} {blas.get('version')}",
                      "blas_core": blas.get("architecture"), "mm_gflops": 2.0 * 1024 ** 3 / best * 1e-9}), flush=True)


def check(env, timeout=300):
    """Runs the probe in a fresh process with env (plus oneDNN's verbose log); a dict of what each library ran."""
    env = dict(env, DNNL_VERBOSE="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe"], env=env, capture_output=True, text=True,
                          timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"ok": False, "why": f"the probe failed (status {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    res = json.loads(lines[-1])
    conv = {}
    for line in lines[:-1]:  # onednn_verbose,exec,cpu,convolution,IMPL,PROP_KIND,...
        f = line.split(",")
        if len(f) > 5 and f[1] == "exec" and f[3] == "convolution":
            conv[f[5]] = f[4]
    res["onednn_conv"] = conv
    return res


def verdict(res, limited, ghz=None):
    """(ok, one line): whether every library ran what was asked, with the numbers."""
    if "mm_gflops" not in res:
        return False, res.get("why", "no result")
    ghz = ghz or cpu_ghz()
    peak = AVX2_FLOPS_PER_CYCLE * ghz if ghz else None
    names = [res["aten"], str(res["blas_core"])] + list(res["onednn_conv"].values())
    wide = [n for n in names if any(w in n.lower() for w in WIDE)]
    problems = []
    if limited:
        if wide:
            problems.append(f"kernels wider than AVX2 still run: {', '.join(wide)}")
        if str(res["blas_core"]).lower() != "haswell":
            problems.append(f"OpenBLAS runs {res['blas_core']} kernels, not Haswell")
        if not res["onednn_conv"]:
            problems.append("oneDNN logged no convolution (its verbose log is missing)")
    conv = ", ".join(f"{k} {v}" for k, v in sorted(res["onednn_conv"].items())) or "-"
    line = (f"ATen '{res['aten']}'; {res['blas']} core {res['blas_core']}: 1024^3 matmul {res['mm_gflops']:.1f} GFLOP/s on 1 thread"
            + (f" (AVX2 peak {peak:.0f} at the reported {ghz:.2f} GHz)" if peak else "")
            + (f" (on AVX2 kernels the rate implies {res['mm_gflops'] / AVX2_FLOPS_PER_CYCLE:.2f} GHz or more)" if limited else "")
            + f"; oneDNN conv: {conv}")
    return not problems, line + ("" if not problems else "; NOT LIMITED: " + "; ".join(problems))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--probe":
        _probe()
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peer_env import clean_env
    threads = int(sys.argv[1]) if len(sys.argv) >= 2 else 1
    base = clean_env(threads)
    ok_all = True
    for name, env, limited in (("unlimited", base, False), ("AVX2-limited", limited_env(base), True)):
        ok, line = verdict(check(env), limited)
        ok_all &= ok
        print(f"{name} ({describe(env)}): {line}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
