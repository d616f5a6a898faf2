"""Whole models for bench/model_bench.py, and PyTorch running them as a peer.

build(name, image_size, seq_len) gives a model in eval mode with random
weights (seeded: every process builds the same one) and its input, batch 1
unless asked (batch B: B images or sequences, the first dimension B):
  resnet18, resnet50, mobilenet_v2   torchvision 0.14, [1, 3, S, S] input
  bert_layer                         nn.TransformerEncoderLayer(768, 12, 3072, batch_first, no dropout), [1, L, 768]
  tiny_cnn                           conv-bn-relu-pool-linear, for tests
  TORCHVISION_MORE                   eleven more torchvision models (branches, shuffles, groups, SE, ViT, Swin), [1, 3, S, S]
BatchNorm's running statistics are random too, so that folding them is
tested rather than skipped as the identity.

PyTorch at its best runs each model three ways (VARIANTS): eager NCHW, eager
channels_last (4-D inputs only) and TorchScript (script, or trace where
script fails) frozen and passed through torch.jit.optimize_for_inference.
Each variant is a peer process of its own, speaking worker.py's protocol:

  torch_models.py serve SPEC     a peer worker (SPEC: {"kind": "model", "impl": VARIANT,
                                 "args": [name, image_size, seq_len(, batch)], "threads": T})
  torch_models.py memory SPEC    prints {"growth_mb": ...}: PyTorch's peak memory for inference
                                 in a fresh process (see peak_memory)

ModelPeer starts one in the environment launcher.py gives every peer
(peer_env.clean_env with blas_choice's OpenBLAS core type).
"""
import copy
import gc
import json
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import blas_choice  # noqa: E402
import launcher  # noqa: E402
import peer_kernels  # noqa: E402
from peer_env import clean_env  # noqa: E402

# Further torchvision models for the ONNX Runtime comparison: concatenated branches (squeezenet, googlenet,
# densenet), channel shuffle (shufflenet), grouped convolutions (resnext, regnet), squeeze-excitation
# (efficientnet, mobilenet_v3), vision transformers at sequence 197 (vit_b_16, image 224 only) and shifted windows (swin_t).
TORCHVISION_MORE = ("squeezenet1_0", "shufflenet_v2_x1_0", "densenet121", "googlenet", "resnext50_32x4d", "regnet_y_400mf",
                    "efficientnet_b0", "mobilenet_v3_small", "convnext_tiny", "vit_b_16", "swin_t")
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_layer", "tiny_cnn") + TORCHVISION_MORE
VARIANTS = ("eager_nchw", "eager_channels_last", "jit")
VARIANT_TEXT = {"eager_nchw": "eager NCHW", "eager_channels_last": "eager channels_last",
                "jit": "jit {how}+freeze+optimize_for_inference"}


def _randomize_batch_norm(module, torch, gen):
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=gen) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=gen) * 0.1)


def build(name, image_size=224, seq_len=128, seed=0, batch=1):
    """(module in eval mode, input tensor) of a named model; the same in every process for a seed."""
    import torch
    if int(batch) < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    torch.manual_seed(seed)
    if name in ("resnet18", "resnet50", "mobilenet_v2") + TORCHVISION_MORE:
        import torchvision
        kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
        module = getattr(torchvision.models, name)(weights=None, **kwargs)
        shape = (1, 3, image_size, image_size)
    elif name == "bert_layer":
        module = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072, dropout=0.0, batch_first=True)
        shape = (1, seq_len, 768)
    elif name == "tiny_cnn":
        module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                     torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))
        shape = (1, 3, image_size, image_size)
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        _randomize_batch_norm(module, torch, gen)
        # torchvision starts ViT's classifier at zero, so its output would be all zeros and checking
        # kiln's output against it would prove nothing: random (seeded) weights instead.
        head = getattr(getattr(module, "heads", None), "head", None)
        if head is not None:
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.02)
            head.bias.copy_(torch.randn(head.bias.shape, generator=gen) * 0.02)
    return module.eval(), torch.randn(int(batch), *shape[1:], generator=gen)


def decoder_block(d=768, heads=12, seed=0):
    """A GPT-2-style decoder block for one generation step, in eval mode: forward(x [b, 1, d], past_k, past_v
    [b, heads, past, d/heads]) returns (y [b, 1, d], k, v [b, heads, past + 1, d/heads]); the new position
    attends to every cached one and itself (no mask is needed for the last position)."""
    import torch

    class DecoderBlock(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x, past_k, past_v):
            b, hd = x.shape[0], d // heads
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q = q.reshape(b, 1, heads, hd).transpose(1, 2)
            k = torch.cat([past_k, k.reshape(b, 1, heads, hd).transpose(1, 2)], dim=2)
            v = torch.cat([past_v, v.reshape(b, 1, heads, hd).transpose(1, 2)], dim=2)
            att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (hd ** -0.5), dim=-1)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, 1, d)
            x = x + self.proj(y)
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x)))), k, v

    torch.manual_seed(seed)
    return DecoderBlock().eval()


def variants_of(name):
    """The VARIANTS that apply to a model: channels_last only where the input is an image."""
    return tuple(v for v in VARIANTS if v != "eager_channels_last" or name != "bert_layer")


def variant(module, x, impl):
    """(run, description): one call of `module` on `x` the way `impl` runs it; run() returns the output."""
    import torch
    m = copy.deepcopy(module).eval()
    if impl == "eager_nchw":
        def run():
            with torch.inference_mode():
                return m(x)
        return run, VARIANT_TEXT[impl] if x.dim() == 4 else "eager"
    if impl == "eager_channels_last":
        if x.dim() != 4:
            raise ValueError(f"channels_last needs a 4-D input, this model's is {x.dim()}-D")
        m = m.to(memory_format=torch.channels_last)
        xc = x.contiguous(memory_format=torch.channels_last)

        def run():
            with torch.inference_mode():
                return m(xc)
        return run, VARIANT_TEXT[impl]
    if impl == "jit":
        with torch.no_grad():
            try:
                scripted, how = torch.jit.script(m), "script"
            except Exception:  # a model script cannot compile: its trace is the next best
                scripted, how = torch.jit.trace(m, (x,)), "trace"
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(scripted.eval()))

        def run():
            with torch.no_grad():
                return frozen(x)
        return run, VARIANT_TEXT[impl].format(how=how)
    raise ValueError(f"unknown variant {impl!r}; known: {', '.join(VARIANTS)}")


def rel_err(got, ref):
    """max |got - ref| / max |ref|, in float64."""
    import numpy as np
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(got - ref)) / max(1e-30, float(np.max(np.abs(ref)))))


def _dense(y):
    return (y.to_dense() if y.is_mkldnn else y).contiguous().numpy()


def make(kind, impl, args, threads, paths=None):
    """worker.py's kernel for a model variant: checked against eager NCHW, warmed up 5 calls and 1 s."""
    if kind != "model":
        raise ValueError(f"torch_models serves kind 'model', not {kind!r}")
    torch = peer_kernels._torch(threads)
    name, image_size, seq_len = args[0], int(args[1]), int(args[2])
    module, x = build(name, image_size, seq_len, batch=_batch(args))
    run, text = variant(module, x, impl)
    check = None
    if impl != "eager_nchw":
        ref = _dense(variant(module, x, "eager_nchw")[0]())
        check = lambda: rel_err(_dense(run()), ref)  # noqa: E731
    return peer_kernels.Kernel(run, peer_kernels._torch_label(torch, text, threads), (5, 1.0), check)


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def _reset_peak_rss():
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory(spec, calls=3):
    """PyTorch's memory for inference: how far the peak RSS rises over the first `calls` inferences.

    The model, its variant (TorchScript compiled and frozen) and the input are
    built first; then the peak is reset to the current RSS and the model runs.
    The rise holds the activations and everything else the first inferences
    allocate (oneDNN's primitives and scratch, TorchScript's profiled graph,
    OpenMP's threads); the weights are not in it.
    """
    import torch
    torch.set_num_threads(int(spec["threads"]))
    module, x = build(spec["args"][0], int(spec["args"][1]), int(spec["args"][2]), batch=_batch(spec["args"]))
    run, text = variant(module, x, spec["impl"])
    gc.collect()
    base_kb = _status_kb("VmRSS")
    if _reset_peak_rss():
        method = f"VmHWM rise over {calls} inferences after /proc/self/clear_refs reset it to VmRSS, in a fresh process"
    else:
        base_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        method = f"ru_maxrss rise over {calls} inferences, in a fresh process (a lower bound: setup's peak hides part)"
    for _ in range(calls):
        run()
    peak_kb = _status_kb("VmHWM") if method.startswith("VmHWM") else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"growth_mb": max(0, peak_kb - base_kb) / 1024.0, "base_mb": base_kb / 1024.0, "variant": text, "method": method}


def _batch(args):
    """The batch of a spec's args: the fourth, when given (specs of batch 1 may leave it out)."""
    return int(args[3]) if len(args) > 3 else 1


def _spec(impl, name, image_size, seq_len, threads, batch=1):
    return json.dumps({"kind": "model", "impl": impl, "args": [name, int(image_size), int(seq_len), int(batch)], "threads": int(threads)})


def peer_env(threads):
    """The environment every peer gets from launcher.py: clean, T threads, the chosen OpenBLAS core type."""
    return clean_env(threads, blas=blas_choice.choose(threads))


class ModelPeer(launcher.Peer):
    """A model variant's peer worker (launcher.Peer's protocol: .label, .time(), .close())."""

    def __init__(self, impl, name, image_size, seq_len, threads, timeout=600, batch=1):
        self._start([sys.executable, os.path.abspath(__file__), "serve", _spec(impl, name, image_size, seq_len, threads, batch)],
                    peer_env(threads), f"peer {impl}", timeout)


def measure_peak_memory(impl, name, image_size, seq_len, threads, timeout=600, batch=1):
    """peak_memory() in a fresh process with the peers' environment; its dict, or {"error": ...}."""
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "memory", _spec(impl, name, image_size, seq_len, threads, batch)],
                              capture_output=True, text=True, timeout=timeout, env=peer_env(threads))
    except subprocess.TimeoutExpired:
        return {"error": f"memory probe timed out after {timeout} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": f"memory probe failed (status {proc.returncode}): {proc.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        import worker
        return worker.serve_module(make, sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "memory":
        print(json.dumps(peak_memory(json.loads(sys.argv[2]))))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
