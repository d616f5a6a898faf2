// Golden loop nests: for a few schedules the printed IR after the whole
// pass pipeline is the clearest statement of what lowering must produce
// (tiling, guard-free dividing splits, vector ramps, inlined padding as a
// guarded load, storage reuse of a dead buffer). Change with care: these
// texts are reviewed by hand.
#include <gtest/gtest.h>

#include "kiln/ir/printer.h"
#include "kiln/ops/nn.h"
#include "kiln/te/lower.h"

namespace kiln {
namespace {

const char* kTiledMatmul = R"(func matmul(A: float32[64, 64], B: float32[64, 64], C: float32[64, 64]) {
  parallel (i.outer, 0, 8) {
    for (j.outer, 0, 8) {
      for (i.inner, 0, 8) {
        C[ramp(i.outer*512 + i.inner*64 + j.outer*8, 1, 8)] = x8(0f)
      }
      for (k.outer, 0, 16) {
        for (k.inner, 0, 4) {
          for (i.inner, 0, 8) {
            C[ramp(i.outer*512 + i.inner*64 + j.outer*8, 1, 8)] = C[ramp(i.outer*512 + i.inner*64 + j.outer*8, 1, 8)] + x8(A[i.outer*512 + i.inner*64 + k.outer*4 + k.inner])*B[ramp(k.outer*256 + k.inner*64 + j.outer*8, 1, 8)]
          }
        }
      }
    }
  }
}
)";

const char* kConvInlinedPadding = R"(func conv2d(X: float32[1, 2, 6, 6], W: float32[4, 2, 3, 3], conv: float32[1, 4, 6, 6]) {
  for (f, 0, 4) {
    for (y, 0, 6) {
      for (x, 0, 6) {
        conv[f*36 + y*6 + x] = 0f
        for (rc, 0, 2) {
          for (ry, 0, 3) {
            for (rx, 0, 3) {
              conv[f*36 + y*6 + x] = conv[f*36 + y*6 + x] + if_then_else(rx + x < 7 && (1 <= rx + x && (ry + y < 7 && 1 <= ry + y)), X[rc*36 + ry*6 + y*6 + rx + x - 7], 0f)*W[f*18 + rc*9 + ry*3 + rx]
            }
          }
        }
      }
    }
  }
}
)";

const char* kSoftmax = R"(func softmax(Y: float32[4, 16], softmax: float32[4, 16]) {
  allocate softmax.max.global[float32 * 4] {
    for (i, 0, 4) {
      softmax.max[i] = (float32)-inf
      for (k, 0, 16) {
        softmax.max[i] = max(softmax.max[i], Y[i*16 + k])
      }
    }
    allocate softmax.exp.global[float32 * 64] {
      for (i, 0, 4) {
        for (j, 0, 16) {
          softmax.exp[i*16 + j] = exp(Y[i*16 + j] - softmax.max[i])
        }
      }
      for (i, 0, 4) {
        softmax.max[i] = 0f
        for (k, 0, 16) {
          softmax.max[i] = softmax.max[i] + softmax.exp[i*16 + k]
        }
      }
      for (i, 0, 4) {
        for (j, 0, 16) {
          softmax[i*16 + j] = softmax.exp[i*16 + j] / softmax.max[i]
        }
      }
    }
  }
}
)";

TEST(Golden, TiledMatmul) {
  te::Tensor A = te::placeholder({64, 64}, DataType::Float(32), "A"), B = te::placeholder({64, 64}, DataType::Float(32), "B");
  te::Tensor C = ops::matmul(A, B);
  te::Schedule s = te::create_schedule({C});
  auto& st = s[C];
  auto t = st.tile(st.axis("i"), st.axis("j"), 8, 8);
  auto [ko, ki] = st.split(st.axis("k"), 4);
  st.reorder({t[0], t[1], ko, ki, t[2], t[3]});
  st.vectorize(t[3]);
  st.parallel(t[0]);
  EXPECT_EQ(to_string(te::lower(s, {A, B, C}, "matmul")), kTiledMatmul);
}

TEST(Golden, Conv2dWithInlinedPadding) {
  te::Tensor X = te::placeholder({1, 2, 6, 6}, DataType::Float(32), "X"), W = te::placeholder({4, 2, 3, 3}, DataType::Float(32), "W");
  te::Tensor P;
  te::Tensor O = ops::conv2d_nchw(X, W, 1, 1, 1, "conv", &P);
  te::Schedule s = te::create_schedule({O});
  s[P].compute_inline();
  EXPECT_EQ(to_string(te::lower(s, {X, W, O}, "conv2d")), kConvInlinedPadding);
}

TEST(Golden, Softmax) {
  te::Tensor Y = te::placeholder({4, 16}, DataType::Float(32), "Y");
  te::Tensor S = ops::softmax(Y);
  EXPECT_EQ(to_string(te::lower(te::create_schedule({S}), {Y, S}, "softmax")), kSoftmax);
}

}  // namespace
}  // namespace kiln
