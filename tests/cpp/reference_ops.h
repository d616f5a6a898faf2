// Naive reference implementations (plain loops, double accumulation) that
// the lowered and compiled kernels are checked against.
#ifndef KILN_TESTS_REFERENCE_OPS_H
#define KILN_TESTS_REFERENCE_OPS_H

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kiln::testing::ref {

using Vec = std::vector<float>;

inline Vec matmul(const Vec& A, const Vec& B, int M, int N, int K) {
  Vec C(M * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k) s += double(A[i * K + k]) * B[k * N + j];
      C[i * N + j] = float(s);
    }
  return C;
}

inline Vec batch_matmul(const Vec& A, const Vec& B, int Bn, int M, int N, int K) {
  Vec C(Bn * M * N);
  for (int b = 0; b < Bn; ++b)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k) s += double(A[(b * M + i) * K + k]) * B[(b * K + k) * N + j];
        C[(b * M + i) * N + j] = float(s);
      }
  return C;
}

struct ConvShape {
  int N, C, H, W, K, KH, KW, stride, pad, dilation;
  int OH() const { return (H + 2 * pad - dilation * (KH - 1) - 1) / stride + 1; }
  int OW() const { return (W + 2 * pad - dilation * (KW - 1) - 1) / stride + 1; }
};

inline Vec conv2d(const Vec& X, const Vec& Wt, const ConvShape& s) {
  Vec O(s.N * s.K * s.OH() * s.OW());
  for (int n = 0; n < s.N; ++n)
    for (int f = 0; f < s.K; ++f)
      for (int y = 0; y < s.OH(); ++y)
        for (int x = 0; x < s.OW(); ++x) {
          double acc = 0;
          for (int c = 0; c < s.C; ++c)
            for (int ky = 0; ky < s.KH; ++ky)
              for (int kx = 0; kx < s.KW; ++kx) {
                int h = y * s.stride + ky * s.dilation - s.pad, w = x * s.stride + kx * s.dilation - s.pad;
                if (h < 0 || h >= s.H || w < 0 || w >= s.W) continue;
                acc += double(X[((n * s.C + c) * s.H + h) * s.W + w]) * Wt[((f * s.C + c) * s.KH + ky) * s.KW + kx];
              }
          O[((n * s.K + f) * s.OH() + y) * s.OW() + x] = float(acc);
        }
  return O;
}

inline Vec depthwise_conv2d(const Vec& X, const Vec& Wt, int N, int C, int H, int W, int KH, int KW, int stride, int pad) {
  int OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  Vec O(N * C * OH * OW);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int y = 0; y < OH; ++y)
        for (int x = 0; x < OW; ++x) {
          double acc = 0;
          for (int ky = 0; ky < KH; ++ky)
            for (int kx = 0; kx < KW; ++kx) {
              int h = y * stride + ky - pad, w = x * stride + kx - pad;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              acc += double(X[((n * C + c) * H + h) * W + w]) * Wt[(c * KH + ky) * KW + kx];
            }
          O[((n * C + c) * OH + y) * OW + x] = float(acc);
        }
  return O;
}

inline Vec max_pool2d(const Vec& X, int N, int C, int H, int W, int k, int stride, int pad) {
  int OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
  Vec O(N * C * OH * OW);
  for (int n = 0; n < N * C; ++n)
    for (int y = 0; y < OH; ++y)
      for (int x = 0; x < OW; ++x) {
        float m = -std::numeric_limits<float>::infinity();
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) {
            int h = y * stride + ky - pad, w = x * stride + kx - pad;
            if (h >= 0 && h < H && w >= 0 && w < W) m = std::max(m, X[(n * H + h) * W + w]);
          }
        O[(n * OH + y) * OW + x] = m;
      }
  return O;
}

inline Vec avg_pool2d(const Vec& X, int N, int C, int H, int W, int k, int stride) {
  int OH = (H - k) / stride + 1, OW = (W - k) / stride + 1;
  Vec O(N * C * OH * OW);
  for (int n = 0; n < N * C; ++n)
    for (int y = 0; y < OH; ++y)
      for (int x = 0; x < OW; ++x) {
        double s = 0;
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) s += X[(n * H + y * stride + ky) * W + x * stride + kx];
        O[(n * OH + y) * OW + x] = float(s / (k * k));
      }
  return O;
}

inline Vec softmax(const Vec& X, int M, int N) {
  Vec O(M * N);
  for (int i = 0; i < M; ++i) {
    float m = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < N; ++j) m = std::max(m, X[i * N + j]);
    double s = 0;
    for (int j = 0; j < N; ++j) s += std::exp(double(X[i * N + j]) - m);
    for (int j = 0; j < N; ++j) O[i * N + j] = float(std::exp(double(X[i * N + j]) - m) / s);
  }
  return O;
}

inline Vec layer_norm(const Vec& X, const Vec& g, const Vec& b, int M, int N, float eps) {
  Vec O(M * N);
  for (int i = 0; i < M; ++i) {
    double mu = 0, var = 0;
    for (int j = 0; j < N; ++j) mu += X[i * N + j];
    mu /= N;
    for (int j = 0; j < N; ++j) var += (X[i * N + j] - mu) * (X[i * N + j] - mu);
    var /= N;
    for (int j = 0; j < N; ++j) O[i * N + j] = float((X[i * N + j] - mu) / std::sqrt(var + eps) * g[j] + b[j]);
  }
  return O;
}

inline Vec transpose(const Vec& X, int M, int N) {
  Vec O(M * N);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) O[j * M + i] = X[i * N + j];
  return O;
}

}  // namespace kiln::testing::ref

#endif  // KILN_TESTS_REFERENCE_OPS_H
