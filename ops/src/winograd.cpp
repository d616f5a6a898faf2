#include "kiln/ops/winograd.h"

#include <algorithm>

#include "kiln/ir/op.h"
#include "kiln/ir/printer.h"
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

// F(4x4, 3x3): each row e of the 6x6 B^T reads four inputs,
//   a(e) * (d[p] + s(e) * d[q]) + (d[r] + t(e) * d[u]),
// with (a, p, s, q, r, t, u) from the table below, picked by selects of
// constants that do not depend on the pixel (hoisted out of the tile loops).
struct BtRow4 {
  double a;
  int64_t p;
  double s;
  int64_t q, r;
  double t;
  int64_t u;
};
constexpr BtRow4 kBt4[6] = {{4, 0, -1, 2, 4, -1, 2}, {-4, 1, 1, 2, 4, 1, 3}, {4, 1, -1, 2, 4, -1, 3},
                            {-2, 1, -1, 3, 4, -1, 2}, {2, 1, -1, 3, 4, -1, 2}, {4, 1, -1, 3, 5, -1, 3}};

// The value of table[e] for e in [0, n): a chain of selects on e.
template <typename T, typename Make>
Expr pick(const Expr& e, int n, const Make& make, T (*value)(int)) {
  Expr v = make(value(n - 1));
  for (int k = n - 2; k >= 0; --k) v = if_then_else(e == E(k), make(value(k)), v);
  return v;
}
Expr pick_index(const Expr& e, int n, int64_t (*value)(int)) { return pick<int64_t>(e, n, [](int64_t v) { return E(v); }, value); }
Expr pick_float(const Expr& e, int n, double (*value)(int)) { return pick<double>(e, n, [](double v) { return F(v); }, value); }

// B^T (6x6) row e applied to x(0..5).
template <typename X>
Expr bt4_row(const Expr& e, const X& x) {
  Expr a = pick_float(e, 6, [](int k) { return kBt4[k].a; }), s = pick_float(e, 6, [](int k) { return kBt4[k].s; });
  Expr t = pick_float(e, 6, [](int k) { return kBt4[k].t; });
  Expr p = pick_index(e, 6, [](int k) { return kBt4[k].p; }), q = pick_index(e, 6, [](int k) { return kBt4[k].q; });
  Expr r = pick_index(e, 6, [](int k) { return kBt4[k].r; }), u = pick_index(e, 6, [](int k) { return kBt4[k].u; });
  return a * (x(p) + s * x(q)) + (x(r) + t * x(u));
}

// A^T (4x6) row d applied to m(0..5): (m1 + s m2) + 2^d (m3 + s m4) + w m[x],
// s = +1 on even rows, -1 on odd; the last term is m0 on row 0, m5 on row 3, nothing else.
template <typename M>
Expr at4_row(const Expr& d, const M& m) {
  Expr s = pick_float(d, 4, [](int k) { return k % 2 == 0 ? 1.0 : -1.0; });
  Expr c = pick_float(d, 4, [](int k) { return static_cast<double>(1 << k); });
  Expr w = pick_float(d, 4, [](int k) { return k == 0 || k == 3 ? 1.0 : 0.0; });
  Expr x = pick_index(d, 4, [](int k) { return int64_t{k == 0 ? 0 : 5}; });
  return (m(E(1)) + s * m(E(2))) + c * (m(E(3)) + s * m(E(4))) + w * m(x);
}

void check_tile(int64_t m, const char* who) {
  KILN_USER_CHECK(m == 2 || m == 4) << who << ": Winograd output tiles are 2x2 or 4x4 (F(2x2, 3x3), F(4x4, 3x3)), not " << m << "x" << m;
}

}  // namespace

WinogradTiles winograd_tiles(int64_t n, int64_t out_h, int64_t out_w, int64_t m) {
  check_tile(m, "winograd_tiles");
  return {n, (out_h + m - 1) / m, (out_w + m - 1) / m, m};
}

te::Tensor winograd_input_nchwc(const te::Tensor& X, int pad_top, int pad_left, int64_t out_h, int64_t out_w, int64_t m, const std::string& name) {
  // The batch may be symbolic (a dynamic batch); the image and channels are static.
  KILN_USER_CHECK(X.ndim() == 5) << "winograd_input_nchwc: '" << X.name() << "' " << extents_to_string(X.shape()) << " is not blocked [N, C/cb, H, W, cb]";
  std::vector<int64_t> xs = {0};
  for (int k = 1; k < 5; ++k) {
    const int64_t* c = as_const_int(X.shape()[k]);
    KILN_USER_CHECK(c) << "winograd_input_nchwc: dimension " << k << " of '" << X.name() << "' " << extents_to_string(X.shape()) << " must be static";
    xs.push_back(*c);
  }
  KILN_USER_CHECK(pad_top >= 0 && pad_left >= 0 && out_h > 0 && out_w > 0) << "winograd_input_nchwc: needs non-negative padding and a non-empty output";
  WinogradTiles t = winograd_tiles(1, out_h, out_w, m);  // one image's tiles
  const int64_t* n = as_const_int(X.shape()[0]);
  Expr count = n ? E(*n * t.count()) : X.shape()[0] * E(t.count());
  const int64_t alpha = t.alpha();
  // Every tile reads alpha x alpha inputs from row m * tile row: pad the
  // bottom and right so the last tiles read zeros past the image (the part of
  // a last tile past the output is dropped by the output transform).
  int pad_bottom = static_cast<int>(std::max<int64_t>(0, m * t.rows + 2 - xs[2] - pad_top));
  int pad_right = static_cast<int>(std::max<int64_t>(0, m * t.cols + 2 - xs[3] - pad_left));
  te::Tensor P = pad_hw(X, pad_top, pad_left, pad_bottom, pad_right, name + ".pad");
  return te::compute({E(alpha * alpha), E(xs[1]), count, E(xs[4])}, [&](const std::vector<Var>& i) {
    Expr e1 = floordiv(i[0], E(alpha)), e2 = floormod(i[0], E(alpha));
    Expr n = floordiv(i[2], E(t.rows * t.cols)), th = floormod(floordiv(i[2], E(t.cols)), E(t.rows)), tw = floormod(i[2], E(t.cols));
    auto d = [&](const Expr& r, const Expr& c) { return P(std::vector<Expr>{n, i[1], th * E(m) + r, tw * E(m) + c, i[3]}); };
    if (m == 4) {
      // 16 reads and 15 multiply-adds: rows of B^T along the columns, then the rows.
      auto row = [&](const Expr& r) { return bt4_row(e2, [&](const Expr& c) { return d(r, c); }); };
      return bt4_row(e1, row);
    }
    // Along the columns first (e2), then the rows (e1): 4 reads, 3 multiply-adds.
    auto row = [&](const Expr& r) { return d(r, bt_first(e2)) + bt_sign(e2) * d(r, bt_second(e2)); };
    return row(bt_first(e1)) + bt_sign(e1) * row(bt_second(e1));
  }, name, {"e", "co", "p", "ci"});
}

te::Tensor winograd_matmul(const te::Tensor& V, const te::Tensor& U, const std::string& name) {
  // The tile count (V's dim 2) may be symbolic: a dynamic batch's.
  std::vector<int64_t> us = const_shape(U), vs;
  for (size_t k = 0; k < V.shape().size(); ++k) vs.push_back(k == 2 ? 0 : as_const_int(V.shape()[k]) ? *as_const_int(V.shape()[k]) : -1);
  KILN_USER_CHECK(vs.size() == 4 && us.size() == 5 && (vs[0] == 16 || vs[0] == 36) && us[0] == vs[0] && vs[1] == us[2] && vs[3] == us[3])
      << "winograd_matmul: transformed input " << extents_to_string(V.shape()) << " and weights " << shape_to_string(us) << " do not match";
  IterVar rco = te::reduce_axis(Range(0, E(vs[1])), "rco"), rci = te::reduce_axis(Range(0, E(vs[3])), "rci");
  return te::compute({E(vs[0]), E(us[1]), V.shape()[2], E(us[4])}, [&](const std::vector<Var>& i) {
    return te::sum(V(std::vector<Expr>{i[0], rco.var(), i[2], rci.var()}) * U(std::vector<Expr>{i[0], i[1], rco.var(), rci.var(), i[3]}), {rco, rci});
  }, name, {"e", "ko", "p", "ki"});
}

te::Tensor winograd_output_nchwc(const te::Tensor& M, int64_t n, int64_t out_h, int64_t out_w, int64_t m, const std::string& name) {
  return winograd_output_nchwc(M, E(n), out_h, out_w, m, name);
}

te::Tensor winograd_output_nchwc(const te::Tensor& M, const Expr& n, int64_t out_h, int64_t out_w, int64_t m, const std::string& name) {
  const std::vector<Expr>& me = M.shape();
  WinogradTiles t = winograd_tiles(1, out_h, out_w, m);  // one image's tiles
  const int64_t alpha = t.alpha();
  const int64_t* nc = as_const_int(n);
  Expr count = nc ? E(*nc * t.count()) : n * E(t.count());
  KILN_USER_CHECK(me.size() == 4 && is_const_int(me[0], alpha * alpha) && same_extent(me[2], count) && as_const_int(me[1]) && as_const_int(me[3]))
      << "winograd_output_nchwc: " << extents_to_string(me) << " is not the product of " << count << " tiles of " << alpha << "x" << alpha
      << " of a " << n << " x " << out_h << " x " << out_w << " output";
  std::vector<int64_t> ms = {alpha * alpha, *as_const_int(me[1]), 0, *as_const_int(me[3])};
  return te::compute({n, E(ms[1]), E(out_h), E(out_w), E(ms[3])}, [&](const std::vector<Var>& i) {
    Expr dy = floormod(i[2], E(m)), dx = floormod(i[3], E(m));
    Expr p = (i[0] * E(t.rows) + floordiv(i[2], E(m))) * E(t.cols) + floordiv(i[3], E(m));
    auto at = [&](const Expr& r, const Expr& c) { return M(std::vector<Expr>{r * E(alpha) + c, i[1], p, i[4]}); };
    if (m == 4) {
      auto row = [&](const Expr& r) { return at4_row(dx, [&](const Expr& c) { return at(r, c); }); };
      return at4_row(dy, row);
    }
    auto row = [&](const Expr& r) { return at(r, dx) + at_sign(dx) * (at(r, dx + 1) + at(r, dx + 2)); };
    return row(dy) + at_sign(dy) * (row(dy + 1) + row(dy + 2));
  }, name, {"n", "ko", "y", "x", "ki"});
}

NDArray winograd_weights(const NDArray& W, int64_t cb, int64_t kb, int64_t m) {
  const auto& s = W.shape();
  KILN_USER_CHECK(W.dtype() == DataType::Float(32) && s.size() == 4 && s[2] == 3 && s[3] == 3)
      << "winograd_weights: needs float32 weights [K, C, 3, 3], got " << shape_to_string(s);
  check_tile(m, "winograd_weights");
  const int64_t K = s[0], C = s[1];
  KILN_USER_CHECK(cb > 0 && kb > 0 && C % cb == 0 && K % kb == 0) << "winograd_weights: blocks " << cb << " and " << kb << " do not divide " << C << " and " << K << " channels";
  static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  static const double G4[6][3] = {{0.25, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                  {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
  const int alpha = static_cast<int>(m) + 2;
  auto G = [&](int a, int j) { return m == 4 ? G4[a][j] : G2[a][j]; };
  NDArray U = NDArray::empty({alpha * alpha, K / kb, C / cb, cb, kb}, DataType::Float(32));
  const float* w = W.data_as<float>();
  float* u = U.data_as<float>();
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (k * C + c) * 9;
      double gg[6][3];  // G g
      for (int a = 0; a < alpha; ++a)
        for (int j = 0; j < 3; ++j) gg[a][j] = G(a, 0) * g[j] + G(a, 1) * g[3 + j] + G(a, 2) * g[6 + j];
      for (int a = 0; a < alpha; ++a)
        for (int b = 0; b < alpha; ++b) {
          double v = gg[a][0] * G(b, 0) + gg[a][1] * G(b, 1) + gg[a][2] * G(b, 2);
          u[((((a * alpha + b) * (K / kb) + k / kb) * (C / cb) + c / cb) * cb + c % cb) * kb + k % kb] = static_cast<float>(v);
        }
    }
  return U;
}

}  // namespace kiln::ops
