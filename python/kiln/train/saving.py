"""Saving and resuming training: ``kiln.train.save(step, path)`` and ``kiln.train.load(step, path)``.

(Not to be confused with kiln/train/checkpoint.py, activation checkpointing: recomputing activations.)

A checkpoint is a directory:

    manifest.json                    written last: the step count, loss scale, data position, random
                                     state; every tensor as pieces (file, byte offset, global start,
                                     shape); every file's size and CRC-32
    shard-00000-of-00002.bin         each rank's pieces, raw bytes one after another
    shard-00000-of-00002.json        that rank's index of them

It is saved as it lives: a tensor-parallel rank writes its blocks of the split weights and their
optimizer state; a pipeline stage its own parameters; a tensor every rank holds whole (data
parallel, or the step's gathered copy) is written by one of them, in turn, so the bytes are shared
out. Loading assembles each tensor the loading step needs from its pieces, so a checkpoint loads on
another number of ranks or another plan of the same model (the parameter names are the model's).

Atomic: the ranks write into ``<path>.partial``, fsync each file, and after a barrier rank 0
writes the manifest (temp name, fsync, rename) and renames the directory to ``<path>`` (an older
checkpoint there is replaced only then). A directory without a manifest, a file of another size
than the manifest says, or other bytes than its checksum, is refused with an error naming the file.
Ranks must see one filesystem (one host, or a shared one across hosts).
"""
import json as _json
import os as _os
import shutil as _shutil
import zlib as _zlib

import numpy as _np

from .._ffi import KilnError, _kiln

FORMAT = "kiln-checkpoint/1"
MANIFEST = "manifest.json"


def _comm():
    d = getattr(_kiln, "dist", None)
    if d is None or d.size() == 1:
        return 0, 1, None
    return d.rank(), d.size(), d


def _tensors(step):
    """{key: whole array} of the step's training state: parameters, optimizer state, buffers."""
    out = {}
    states = step.optimizer_states
    for i, n in enumerate(step.parameters):
        out[f"param/{n}"] = dict.__getitem__(step.parameters, n)
        for s, a in zip(step.optimizer_state_names, states[i]):
            out[f"state/{n}/{s}"] = a
    for n in getattr(step, "buffers", {}) or {}:
        out[f"buffer/{n}"] = dict.__getitem__(step.buffers, n)
    return out


def _graph_name(key):
    """The step graph's input that holds the tensor `key` (its sharding: the plan's blocks)."""
    kind, rest = key.split("/", 1)
    if kind != "state":
        return rest
    name, s = rest.rsplit("/", 1)
    return f"{name}.{s}"


def _pieces(step, r, n):
    """(key, start, block array) this rank writes. A block held alike by several ranks is written by one
    of them, chosen in turn over the tensors."""
    tensors = _tensors(step)
    plan = getattr(step, "plan", None)
    owner = getattr(plan, "owner", None)  # a pipeline: a stage's parameters, a shared one by its first stage
    blocks = None
    if owner is None and plan is not None and n > 1 and hasattr(plan, "sharded"):
        names = list(plan.model.input_names)
        per_rank = [plan.sharded.input_blocks(q) for q in range(n)]
        blocks = {nm: [tuple(map(tuple, per_rank[q][k])) for q in range(n)] for k, nm in enumerate(names)}
    out = []
    for i, (key, a) in enumerate(tensors.items()):
        a = _np.ascontiguousarray(a)
        if owner is not None:
            name = key.split("/", 1)[1].rsplit("/", 1)[0] if key.startswith("state/") else key.split("/", 1)[1]
            if owner.get(name, r) == r:
                out.append((key, [0] * a.ndim, a))
            continue
        bl = (blocks or {}).get(_graph_name(key)) or [()] * n
        mine = bl[r] if len(bl[r]) == a.ndim and bl[r] else tuple((0, s) for s in a.shape)
        same = [q for q in range(n) if (bl[q] or tuple((0, s) for s in a.shape)) == mine]
        if same[i % len(same)] == r:
            sl = tuple(slice(o, o + k) for o, k in mine)
            out.append((key, [int(o) for o, _ in mine], _np.ascontiguousarray(a[sl])))
    return out


def _fsync_dir(path):
    fd = _os.open(path, _os.O_RDONLY)
    try:
        _os.fsync(fd)
    finally:
        _os.close(fd)


def _write_durably(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        _os.fsync(f.fileno())


def _write_shard(tmp, r, n, pieces, shapes):
    """This rank's .bin and its .json index, both fsynced."""
    stem = f"shard-{r:05d}-of-{n:05d}"
    index, at, crc = [], 0, 0
    with open(_os.path.join(tmp, stem + ".bin"), "wb") as f:
        for key, start, a in pieces:
            b = a.tobytes()
            f.write(b)
            crc = _zlib.crc32(b, crc)
            index.append({"key": key, "dtype": a.dtype.str, "global_shape": list(shapes[key]), "start": start,
                          "shape": list(a.shape), "offset": at, "nbytes": len(b)})
            at += len(b)
        f.flush()
        _os.fsync(f.fileno())
    _write_durably(_os.path.join(tmp, stem + ".json"),
                   _json.dumps({"file": stem + ".bin", "bytes": at, "crc32": crc, "pieces": index}).encode())


def _file_entry(path):
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            crc = _zlib.crc32(chunk, crc)
    return {"bytes": _os.path.getsize(path), "crc32": crc}


def _meta(step, data_position, rng, extra):
    sc = getattr(step, "scaler", None)
    return {"steps": int(step.steps),
            "loss_scale": None if sc is None else {"scale": sc.scale, "good_steps": sc.good_steps, "skipped": sc.skipped},
            "data_position": data_position,
            "rng": None if rng is None else rng.bit_generator.state,
            "extra": extra}


def save(step, path, data_position=None, rng=None, extra=None):
    """Saves `step`'s training state to the directory `path` (see the module comment); every rank calls it.
    data_position: where the data loader is (anything JSON holds); rng: a numpy Generator whose state to
    keep (shuffling, augmentation); extra: anything else JSON holds. Returns the manifest (a dict)."""
    r, n, d = _comm()
    path = _os.path.abspath(str(path))
    tmp = path + ".partial"
    if r == 0:
        _shutil.rmtree(tmp, ignore_errors=True)  # a save interrupted before
        _os.makedirs(tmp)
    if d is not None:
        d.barrier()
    shapes = {k: a.shape for k, a in _tensors(step).items()}
    _write_shard(tmp, r, n, _pieces(step, r, n), shapes)
    if d is not None:
        d.barrier()
    manifest = None
    if r == 0:
        manifest = _manifest(tmp, n, _meta(step, data_position, rng, extra))
        old = path + ".old"
        if _os.path.exists(path):
            _shutil.rmtree(old, ignore_errors=True)
            _os.rename(path, old)
        _os.rename(tmp, path)
        _fsync_dir(_os.path.dirname(path) or ".")
        _shutil.rmtree(old, ignore_errors=True)
    if d is not None:
        d.barrier()
    return manifest


def _manifest(tmp, n, meta):
    """Gathers the ranks' indexes into manifest.json (temp name, fsync, rename): the last file written."""
    tensors, files = {}, {}
    for q in range(n):
        stem = f"shard-{q:05d}-of-{n:05d}"
        with open(_os.path.join(tmp, stem + ".json")) as f:
            idx = _json.load(f)
        files[stem + ".json"] = _file_entry(_os.path.join(tmp, stem + ".json"))
        files[idx["file"]] = {"bytes": idx["bytes"], "crc32": idx["crc32"]}
        for p in idx["pieces"]:
            t = tensors.setdefault(p["key"], {"dtype": p["dtype"], "shape": p["global_shape"], "pieces": []})
            t["pieces"].append({"file": idx["file"], "offset": p["offset"], "nbytes": p["nbytes"], "start": p["start"],
                                "shape": p["shape"]})
    manifest = dict(format=FORMAT, ranks=n, tensors=tensors, files=files, **meta)
    _write_durably(_os.path.join(tmp, MANIFEST + ".tmp"), _json.dumps(manifest, indent=1).encode())
    _os.rename(_os.path.join(tmp, MANIFEST + ".tmp"), _os.path.join(tmp, MANIFEST))
    _fsync_dir(tmp)
    return manifest


def read_manifest(path):
    """The checkpoint's manifest, after checking that every file it names is there with its size.
    Raises KilnError naming what is missing or short, and the fix."""
    path = str(path)
    mf = _os.path.join(path, MANIFEST)
    if not _os.path.isdir(path):
        partial = " (a save into it was interrupted: " + path + ".partial is left)" if _os.path.isdir(path + ".partial") else ""
        if _os.path.isdir(path + ".old"):  # a save died between moving the old checkpoint aside and the new into place
            partial += f"; the previous checkpoint is whole at {path}.old: rename it to {path} to resume from it"
        raise KilnError(f"no checkpoint at {path}{partial}; give the directory kiln.train.save wrote")
    if not _os.path.exists(mf):
        raise KilnError(f"{mf} is missing: {path} is not a complete kiln checkpoint (a save was interrupted, or "
                        "files were copied in part); resume from an earlier checkpoint or copy the whole directory")
    try:
        with open(mf) as f:
            manifest = _json.load(f)
    except (ValueError, OSError) as e:
        raise KilnError(f"{mf} is unreadable ({e}): the checkpoint is damaged; resume from an earlier one") from None
    if manifest.get("format") != FORMAT:
        raise KilnError(f"{mf}: format {manifest.get('format')!r}, this kiln reads {FORMAT!r}")
    for name, e in manifest["files"].items():
        fp = _os.path.join(path, name)
        if not _os.path.exists(fp):
            raise KilnError(f"checkpoint file {fp} is missing (the manifest lists it); copy the whole directory, "
                            "or resume from an earlier checkpoint")
        size = _os.path.getsize(fp)
        if size != e["bytes"]:
            raise KilnError(f"checkpoint file {fp} has {size} bytes, the manifest says {e['bytes']}: it is truncated "
                            "or was overwritten; copy it again or resume from an earlier checkpoint")
    return manifest


def _verified_bytes(path, name, entry, cache):
    if name not in cache:
        fp = _os.path.join(path, name)
        with open(fp, "rb") as f:
            data = f.read()
        if _zlib.crc32(data) != entry["crc32"]:
            raise KilnError(f"checkpoint file {fp} fails its checksum (CRC-32 {_zlib.crc32(data):08x}, the manifest "
                            f"says {entry['crc32']:08x}): its bytes are corrupt; resume from an earlier checkpoint")
        cache[name] = data
    return cache[name]


def _assemble(path, manifest, key, cache):
    t = manifest["tensors"][key]
    out = _np.empty(t["shape"], _np.dtype(t["dtype"]))
    covered = 0
    for p in t["pieces"]:
        data = _verified_bytes(path, p["file"], manifest["files"][p["file"]], cache)
        block = _np.frombuffer(data, out.dtype, count=int(_np.prod(p["shape"], dtype=_np.int64)),
                               offset=p["offset"]).reshape(p["shape"])
        out[tuple(slice(s, s + k) for s, k in zip(p["start"], p["shape"]))] = block
        covered += block.size
    if covered != out.size:
        raise KilnError(f"checkpoint {path}: the pieces of {key} cover {covered} of its {out.size} elements; "
                        "the manifest is inconsistent: resume from another checkpoint")
    return out


def load(step, path, rng=None):
    """Loads the checkpoint at `path` into `step` (a kiln.train step, data or tensor parallel, or a pipeline
    stage), saved on any number of ranks by a step of the same model and optimizer; every rank calls it.
    rng: a numpy Generator to restore. Returns {"steps", "data_position", "extra", "loss_scale"}."""
    manifest = read_manifest(path)
    path = str(path)
    cache = {}
    for key, cur in _tensors(step).items():
        if key not in manifest["tensors"]:
            raise KilnError(f"checkpoint {path} has no {key} (it has {len(manifest['tensors'])} tensors, e.g. "
                            f"{sorted(manifest['tensors'])[:4]}): it was saved from another model or optimizer")
        a = _assemble(path, manifest, key, cache)
        if a.shape != cur.shape or a.dtype != cur.dtype:
            raise KilnError(f"checkpoint {path}: {key} is {a.dtype}{list(a.shape)}, the step's is {cur.dtype}{list(cur.shape)}")
        _put(step, key, a)
    step.steps = int(manifest["steps"])
    sc, ls = getattr(step, "scaler", None), manifest.get("loss_scale")
    if sc is not None and ls is not None:
        sc.scale, sc.good_steps, sc.skipped = float(ls["scale"]), int(ls["good_steps"]), int(ls["skipped"])
    if rng is not None and manifest.get("rng") is not None:
        rng.bit_generator.state = manifest["rng"]
    return {k: manifest.get(k) for k in ("steps", "data_position", "extra", "loss_scale")}


def _put(step, key, a):
    kind, rest = key.split("/", 1)
    if kind == "param":
        dict.__setitem__(step.parameters, rest, _np.array(a, order="C"))
    elif kind == "buffer":
        dict.__setitem__(step.buffers, rest, _np.array(a, order="C"))
    else:
        name, s = rest.rsplit("/", 1)
        i = list(step.parameters).index(name)
        step.optimizer_states[i][list(step.optimizer_state_names).index(s)] = _np.array(a, order="C")
