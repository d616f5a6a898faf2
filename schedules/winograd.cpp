#include "kiln/ops/winograd.h"

#include <algorithm>

#include "kiln/ir/op.h"
#include "kiln/ops/broadcast.h"
#include "kiln/ops/layout.h"
#include "kiln/support/error.h"

namespace kiln::ops {

namespace {

Expr E(int64_t v) { return index_imm(v); }
Expr F(double v) { return make_const(DataType::Float(32), v); }

// Row e of B^T (F(2x2, 3x3)) has two non-zeros: d[first(e)] + sign(e) * d[second(e)].
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
Expr bt_first(const Expr& e) { return if_then_else(e == E(3), E(1), e); }
Expr bt_second(const Expr& e) { return if_then_else(e == E(3), E(3), if_then_else(e == E(2), E(1), E(2))); }
Expr bt_sign(const Expr& e) { return if_then_else(e == E(1), F(1), F(-1)); }

// Row d of A^T = [1 1 1 0; 0 1 -1 -1] reads m[d], m[d + 1], m[d + 2]: m[d] + sign(d) * (m[d + 1] + m[d + 2]).
Expr at_sign(const Expr& d) { return if_then_else(d == E(0), F(1), F(-1)); }

}  // namespace

WinogradTiles winograd_tiles(int64_t n, int64_t out_h, int64_t out_w) { return {n, (out_h + 1) / 2, (out_w + 1) / 2}; }

te::Tensor winograd_input_nchwc(const te::Tensor& X, int pad_top, int pad_left, int64_t out_h, int64_t out_w, const std::string& name) {
  std::vector<int64_t> xs = const_shape(X);
  KILN_USER_CHECK(xs.size() == 5) << "winograd_input_nchwc: '" << X.name() << "' " << shape_to_string(xs) << " is not blocked [N, C/cb, H, W, cb]";
  KILN_USER_CHECK(pad_top >= 0 && pad_left >= 0 && out_h > 0 && out_w > 0) << "winograd_input_nchwc: needs non-negative padding and a non-empty output";
  WinogradTiles t = winograd_tiles(xs[0], out_h, out_w);
  // Every tile reads 4x4 inputs from row 2 * tile row: pad the bottom and
  // right so the last tiles read zeros past the image (an odd output's last
  // half tile is dropped by the output transform).
  int pad_bottom = static_cast<int>(std::max<int64_t>(0, 2 * t.rows + 2 - xs[2] - pad_top));
  int pad_right = static_cast<int>(std::max<int64_t>(0, 2 * t.cols + 2 - xs[3] - pad_left));
  te::Tensor P = pad_hw(X, pad_top, pad_left, pad_bottom, pad_right, name + ".pad");
  return te::compute({E(16), E(xs[1]), E(t.count()), E(xs[4])}, [&](const std::vector<Var>& i) {
    Expr e1 = floordiv(i[0], E(4)), e2 = floormod(i[0], E(4));
    Expr n = floordiv(i[2], E(t.rows * t.cols)), th = floormod(floordiv(i[2], E(t.cols)), E(t.rows)), tw = floormod(i[2], E(t.cols));
    auto d = [&](const Expr& r, const Expr& c) { return P(std::vector<Expr>{n, i[1], th * 2 + r, tw * 2 + c, i[3]}); };
    // Along the columns first (e2), then the rows (e1): 4 reads, 3 multiply-adds.
    auto row = [&](const Expr& r) { return d(r, bt_first(e2)) + bt_sign(e2) * d(r, bt_second(e2)); };
    return row(bt_first(e1)) + bt_sign(e1) * row(bt_second(e1));
  }, name, {"e", "co", "p", "ci"});
}

te::Tensor winograd_matmul(const te::Tensor& V, const te::Tensor& U, const std::string& name) {
  std::vector<int64_t> vs = const_shape(V), us = const_shape(U);
  KILN_USER_CHECK(vs.size() == 4 && us.size() == 5 && vs[0] == 16 && us[0] == 16 && vs[1] == us[2] && vs[3] == us[3])
      << "winograd_matmul: transformed input " << shape_to_string(vs) << " and weights " << shape_to_string(us) << " do not match";
  IterVar rco = te::reduce_axis(Range(0, E(vs[1])), "rco"), rci = te::reduce_axis(Range(0, E(vs[3])), "rci");
  return te::compute({E(16), E(us[1]), E(vs[2]), E(us[4])}, [&](const std::vector<Var>& i) {
    return te::sum(V(std::vector<Expr>{i[0], rco.var(), i[2], rci.var()}) * U(std::vector<Expr>{i[0], i[1], rco.var(), rci.var(), i[3]}), {rco, rci});
  }, name, {"e", "ko", "p", "ki"});
}

te::Tensor winograd_output_nchwc(const te::Tensor& M, int64_t n, int64_t out_h, int64_t out_w, const std::string& name) {
  std::vector<int64_t> ms = const_shape(M);
  WinogradTiles t = winograd_tiles(n, out_h, out_w);
  KILN_USER_CHECK(ms.size() == 4 && ms[0] == 16 && ms[2] == t.count())
      << "winograd_output_nchwc: " << shape_to_string(ms) << " is not the product of " << t.count() << " tiles of a " << n << " x " << out_h << " x " << out_w << " output";
  return te::compute({E(n), E(ms[1]), E(out_h), E(out_w), E(ms[3])}, [&](const std::vector<Var>& i) {
    Expr dy = floormod(i[2], E(2)), dx = floormod(i[3], E(2));
    Expr p = (i[0] * E(t.rows) + floordiv(i[2], E(2))) * E(t.cols) + floordiv(i[3], E(2));
    auto m = [&](const Expr& r, const Expr& c) { return M(std::vector<Expr>{r * 4 + c, i[1], p, i[4]}); };
    auto row = [&](const Expr& r) { return m(r, dx) + at_sign(dx) * (m(r, dx + 1) + m(r, dx + 2)); };
    return row(dy) + at_sign(dy) * (row(dy + 1) + row(dy + 2));
  }, name, {"n", "ko", "y", "x", "ki"});
}

NDArray winograd_weights(const NDArray& W, int64_t cb, int64_t kb) {
  const auto& s = W.shape();
  KILN_USER_CHECK(W.dtype() == DataType::Float(32) && s.size() == 4 && s[2] == 3 && s[3] == 3)
      << "winograd_weights: needs float32 weights [K, C, 3, 3], got " << shape_to_string(s);
  const int64_t K = s[0], C = s[1];
  KILN_USER_CHECK(cb > 0 && kb > 0 && C % cb == 0 && K % kb == 0) << "winograd_weights: blocks " << cb << " and " << kb << " do not divide " << C << " and " << K << " channels";
  static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  NDArray U = NDArray::empty({16, K / kb, C / cb, cb, kb}, DataType::Float(32));
  const float* w = W.data_as<float>();
  float* u = U.data_as<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (k * C + c) * 9;
      double gg[4][3];  // G g
      for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 3; ++j) gg[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
          double v = gg[a][0] * G[b][0] + gg[a][1] * G[b][1] + gg[a][2] * G[b][2];
          u[((((a * 4 + b) * (K / kb) + k / kb) * (C / cb) + c / cb) * cb + c % cb) * kb + k % kb] = static_cast<float>(v);
        }
    }
  return U;
}

}  // namespace kiln::ops
