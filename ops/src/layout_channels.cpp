// Channel index maps in the blocked layout (layout.h): a shuffle, a slice
// or a join of channels that do not fall on whole blocks, computed straight
// from the blocked inputs. Source indices are clamped into the inputs'
// channels, so bound inference never asks for a channel a tensor lacks.
#include <algorithm>

#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/layout.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }

// The static block and true channel count of a blocked input (checked against what it holds).
int64_t block_of(const te::Tensor& X, int64_t C, const char* what) {
  const std::vector<Expr>& s = X.shape();
  const int64_t* blocks = s.size() == 5 ? as_const_int(s[1]) : nullptr;
  const int64_t* b = s.size() == 5 ? as_const_int(s[4]) : nullptr;
  KILN_USER_CHECK(blocks && b && *b > 0) << what << ": '" << X.name() << "' " << extents_to_string(s) << " must be blocked [N, C/b, H, W, b] with static channels";
  KILN_USER_CHECK(C > 0 && C <= *blocks * *b && *blocks * *b - C < *b)
      << what << ": '" << X.name() << "' " << extents_to_string(s) << " does not hold " << C << " channels";
  return *b;
}

// Channel c (clamped to [0, C)) of blocked X at pixel (n, h, w).
Expr read_channel(const te::Tensor& X, int64_t b, int64_t C, const Expr& c, const Var& n, const Var& h, const Var& w) {
  Expr k = max(min(c, E(C - 1)), E(0));
  return X(std::vector<Expr>{n, floordiv(k, E(b)), h, w, floormod(k, E(b))});
}

}  // namespace

te::Tensor channel_permute_nchwc(const te::Tensor& X, int64_t C, int64_t groups, int64_t start, int64_t count, int to, const std::string& name) {
  const int64_t b = block_of(X, C, "channel_permute_nchwc");
  KILN_USER_CHECK(groups > 0 && C % groups == 0 && start >= 0 && count > 0 && start + count <= C && to > 0)
      << "channel_permute_nchwc: " << count << " channels from " << start << " of " << C << " in " << groups << " groups, block " << to << " do not fit";
  const int64_t blocks = (count + to - 1) / to, per_group = C / groups;
  const std::vector<Expr>& s = X.shape();
  return te::compute({s[0], E(blocks), s[2], s[3], E(to)},
                     [&](const std::vector<Var>& i) {
                       Expr j = i[1] * E(to) + i[4];
                       Expr t = min(j + E(start), E(start + count - 1));
                       Expr src = groups == 1 ? t : floormod(t, E(groups)) * E(per_group) + floordiv(t, E(groups));
                       Expr v = read_channel(X, b, C, src, i[0], i[2], i[3]);
                       return blocks * to == count ? v : if_then_else(j < E(count), v, make_zero(X.dtype()));
                     },
                     name, {"n", "co", "h", "w", "ci"});
}

te::Tensor channel_concat_nchwc(const std::vector<te::Tensor>& Xs, const std::vector<int64_t>& channels, int to, const std::string& name) {
  KILN_USER_CHECK(!Xs.empty() && Xs.size() == channels.size() && to > 0) << "channel_concat_nchwc: needs one channel count per input and a positive block";
  std::vector<int64_t> blocks, offsets;
  int64_t total = 0;
  for (size_t k = 0; k < Xs.size(); ++k) {
    blocks.push_back(block_of(Xs[k], channels[k], "channel_concat_nchwc"));
    offsets.push_back(total);
    total += channels[k];
  }
  const int64_t out_blocks = (total + to - 1) / to;
  const std::vector<Expr>& s = Xs[0].shape();
  return te::compute({s[0], E(out_blocks), s[2], s[3], E(to)},
                     [&](const std::vector<Var>& i) {
                       Expr j = i[1] * E(to) + i[4];
                       // The last input also serves the padded tail (clamped to its last channel), then zeroed.
                       Expr v = read_channel(Xs.back(), blocks.back(), channels.back(), j - E(offsets.back()), i[0], i[2], i[3]);
                       for (size_t k = Xs.size() - 1; k-- > 0;)
                         v = if_then_else(j < E(offsets[k + 1]), read_channel(Xs[k], blocks[k], channels[k], j - E(offsets[k]), i[0], i[2], i[3]), v);
                       return out_blocks * to == total ? v : if_then_else(j < E(total), v, make_zero(Xs[0].dtype()));
                     },
                     name, {"n", "co", "h", "w", "ci"});
}

}  // namespace kiln::ops
