// The GPU rules' tensor-core sketch (rule 2 on tensor cores): an output
// matmul of float16 or bfloat16 inputs summed in float32, its last two
// spatial axes and its reduce axis multiples of 16, is tiled for warps:
//
//   blocks (blockIdx.y, x) of warps (threadIdx.y), each warp a grid of
//   16x16 accumulator fragments; the reduce axis in outer steps, each
//   staging the inputs' tiles in shared memory (rows padded, 16-byte copies
//   by all the block's threads: threadIdx.x is the 32 lanes) and then
//   multiplying them 16x16x16 at a time (s.tensor_core, lowered by
//   pass::lower_tensor_core); leading spatial axes (a batch) go to
//   blockIdx.z. Each axis's decisions count 16-wide tiles: (blocks, warps,
//   fragments per warp) for i and j, (outer steps, tiles per step) for k.
#include "kiln/ir/dtype.h"
#include "kiln/ops/search_space.h"
#include "kiln/support/error.h"
#include "search_space_internal.h"

namespace kiln::ops::detail {

namespace {

// e is a load of a float16/bfloat16 input cast to float32; *t its type.
bool cast_input(const Expr& e, DataType* t) {
  const Cast* c = e.as<Cast>();
  const TensorLoad* l = c ? c->value.as<TensorLoad>() : nullptr;
  if (!l || c->dtype != DataType::Float(32) || (l->dtype != DataType::Float(16) && l->dtype != DataType::BFloat16())) return false;
  *t = l->dtype;
  return true;
}

}  // namespace

bool tensor_core_matmul(const StageInfo& s) {
  if (!s.op || !s.output || !s.reduction || !s.has_reuse || s.reduce.size() != 1 || s.spatial.size() < 2) return false;
  size_t n = s.spatial.size();
  if (s.spatial[n - 2] % 16 || s.spatial[n - 1] % 16 || s.reduce[0] % 16) return false;
  const Reduce* r = s.body.as<Reduce>();
  const Mul* m = r && r->reduce_kind == ReduceKind::Sum && r->dtype == DataType::Float(32) && is_one(r->condition) ? r->source.as<Mul>() : nullptr;
  if (!m) return false;
  DataType a, b;
  return cast_input(m->a, &a) && cast_input(m->b, &b) && a == b;
}

void lay_out_tensor_core(const StageInfo& s, StagePlan* p, const std::function<int(const std::string&, int64_t, int, int)>& tile_slot) {
  size_t n = s.spatial.size();
  for (size_t k = n - 2; k < n; ++k) p->spatial_tiles.push_back(tile_slot(s.name + "." + s.op->axis[k].name() + ".tiles16", s.spatial[k] / 16, 3, 4));
  p->reduce_tiles.push_back(tile_slot(s.name + "." + s.op->reduce_axis[0].name() + ".tiles16", s.reduce[0] / 16, 2, 4));
}

// Up to 4x4 fragments per warp (64x64: 128 accumulator registers per lane),
// 2x2 warps, and k steps of 32.
void tensor_core_defaults(const StageInfo& s, const Sketch& sk, const StagePlan& p, std::vector<int>* d) {
  size_t n = s.spatial.size();
  for (size_t k = 0; k < 2; ++k) {
    int* f = d->data() + sk.slots[p.spatial_tiles[k]].offset;
    int64_t tiles = s.spatial[n - 2 + k] / 16;
    int64_t frags = divisor_at_most(tiles, 4), warps = divisor_at_most(tiles / frags, 2);
    f[0] = static_cast<int>(tiles / frags / warps);
    f[1] = static_cast<int>(warps);
    f[2] = static_cast<int>(frags);
  }
  int* f = d->data() + sk.slots[p.reduce_tiles[0]].offset;
  int64_t tiles = s.reduce[0] / 16, step = divisor_at_most(tiles, 2);
  f[0] = static_cast<int>(tiles / step);
  f[1] = static_cast<int>(step);
}

void apply_tensor_core(te::Schedule& sch, const StageInfo& info, const int* ti, const int* tj, const int* tk, int pad) {
  te::Tensor out_t = info.tensor;
  te::Tensor local = sch.cache_write(out_t, "local");
  std::vector<te::Tensor> shared;
  for (const te::Tensor& t : info.op->input_tensors()) shared.push_back(sch.cache_read(t, "shared", {local}));
  te::Stage& out = sch[out_t];
  size_t n = info.spatial.size();
  std::vector<IterVar> roots = out.leaf_iter_vars();
  // The write-back: blocks, warps, fragments, then each fragment's 16x16 nest.
  int fi[4] = {ti[0], ti[1], ti[2], 16}, fj[4] = {tj[0], tj[1], tj[2], 16};
  std::vector<Loop> li = split_into(out, roots[n - 2], fi, 4), lj = split_into(out, roots[n - 1], fj, 4);
  std::vector<Loop> order;
  for (size_t k = 0; k + 2 < n; ++k) order.push_back({roots[k], info.spatial[k]});
  for (int level = 0; level < 4; ++level) order.push_back(li[level]), order.push_back(lj[level]);
  reorder_loops(out, order);
  if (n > 2) {
    std::vector<IterVar> lead(roots.begin(), roots.begin() + (n - 2));
    out.bind(lead.size() == 1 ? lead[0] : out.fuse(lead), "blockIdx.z");
  }
  out.bind(li[0].iv, "blockIdx.y");
  out.bind(lj[0].iv, "blockIdx.x");
  out.bind(out.fuse(li[1].iv, lj[1].iv), "threadIdx.y");
  int warps = ti[1] * tj[1];
  // The accumulation at the block: outer k steps at block level, the warps' fragments inside.
  te::Stage& acc = sch[local];
  acc.compute_at(out, lj[0].iv);
  std::vector<IterVar> a = acc.leaf_iter_vars();
  auto [wi, ri] = acc.split(a[n - 2], ti[2] * 16);
  auto [wj, rj] = acc.split(a[n - 1], tj[2] * 16);
  auto [gi, ii] = acc.split(ri, 16);
  auto [gj, jj] = acc.split(rj, 16);
  auto [ko, rk] = acc.split(a[n], tk[1] * 16);
  auto [kf, kk] = acc.split(rk, 16);
  std::vector<IterVar> aorder(a.begin(), a.begin() + (n - 2));
  aorder.insert(aorder.end(), {ko, wi, wj, kf, gi, gj, ii, jj, kk});
  acc.reorder(aorder);
  acc.bind(acc.fuse(wi, wj), "threadIdx.y");
  acc.unroll(kf);
  acc.tensor_core(ii);
  // Staging: every thread copies 16 bytes (8 elements) at a time; rows padded to `pad` past a multiple of 32.
  for (const te::Tensor& t : shared) {
    te::Stage& copy = sch[t];
    copy.compute_at(acc, ko);
    std::vector<IterVar> axes = copy.leaf_iter_vars();
    if (pad) copy.storage_align(axes[axes.size() - 2], 32, pad);
    auto [co, v] = copy.split(axes.back(), 8);
    axes.back() = co;
    auto [rest, tx] = copy.split(axes.size() == 1 ? axes[0] : copy.fuse(axes), 32);
    auto [fo, ty] = copy.split(rest, warps);
    copy.reorder({ty, tx, fo, v});
    copy.bind(ty, "threadIdx.y");
    copy.bind(tx, "threadIdx.x");
    copy.vectorize(v);
  }
}

}  // namespace kiln::ops::detail

namespace kiln::ops {

te::Schedule tensor_core_schedule(const std::vector<te::Tensor>& args, const TensorCoreTiles& tiles) {
  using namespace detail;
  Task task = make_task(args, Target::parse("cuda -arch=sm_90"), "tensor_core_schedule");
  DagInfo dag = analyze_dag(task);
  const StageInfo* mm = nullptr;
  for (const StageInfo& s : dag.stages)
    if (s.output && s.op) mm = &s;
  KILN_USER_CHECK(mm && tensor_core_matmul(*mm)) << "tensor_core_schedule of '" << (mm ? mm->name : std::string("?"))
                                                 << "': the output must be a matmul of float16 or bfloat16 inputs summed in float32 (sum over k of float32(a) * float32(b)), "
                                                 << "its last two axes and its reduce axis multiples of 16";
  size_t n = mm->spatial.size();
  int64_t M = mm->spatial[n - 2], N = mm->spatial[n - 1], K = mm->reduce[0];
  const auto [bm, bn] = tiles.block;
  const auto [wm, wn] = tiles.warp;
  auto divides = [&](bool ok, const std::string& what) {
    KILN_USER_CHECK(ok) << "tensor_core_schedule of '" << mm->name << "': " << what
                        << " does not divide; pick tiles that divide the shape (tensor cores take whole 16x16x16 tiles)";
  };
  divides(bm > 0 && M % bm == 0, "M=" + std::to_string(M) + " by block[0]=" + std::to_string(bm));
  divides(bn > 0 && N % bn == 0, "N=" + std::to_string(N) + " by block[1]=" + std::to_string(bn));
  divides(wm > 0 && bm % wm == 0, "block[0]=" + std::to_string(bm) + " by warp[0]=" + std::to_string(wm));
  divides(wn > 0 && bn % wn == 0, "block[1]=" + std::to_string(bn) + " by warp[1]=" + std::to_string(wn));
  divides(wm % 16 == 0 && wn % 16 == 0 && tiles.k_step > 0 && tiles.k_step % 16 == 0,
          "warp=(" + std::to_string(wm) + ", " + std::to_string(wn) + ") and k_step=" + std::to_string(tiles.k_step) + " by 16");
  divides(K % tiles.k_step == 0, "K=" + std::to_string(K) + " by k_step=" + std::to_string(tiles.k_step));
  int ti[3] = {int(M / bm), int(bm / wm), int(wm / 16)}, tj[3] = {int(N / bn), int(bn / wn), int(wn / 16)};
  int tk[2] = {int(K / tiles.k_step), int(tiles.k_step / 16)};
  te::Schedule sch = te::create_schedule(task.outputs);
  apply_tensor_core(sch, *mm, ti, tj, tk, tiles.pad);
  return sch;
}

}  // namespace kiln::ops
