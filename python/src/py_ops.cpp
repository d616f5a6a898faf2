// kiln.ops: the operator library's compute definitions (ops/include/kiln/ops/nn.h).
// Each returns the output tensor; schedule it like any other.
#include "kiln/ops/layout.h"
#include "kiln/ops/nn.h"
#include "kiln_py.h"

namespace kiln::python {

void define_ops(py::module_& m) {
  py::module_ ops = m.def_submodule("ops", "Compute definitions of common operators (NCHW images, OIHW weights, row-major matrices).");
  using te::Tensor;
  ops.def("matmul", &kiln::ops::matmul, py::arg("A"), py::arg("B"), py::arg("name") = "C");
  ops.def("batch_matmul", &kiln::ops::batch_matmul, py::arg("A"), py::arg("B"), py::arg("name") = "C");
  ops.def("matmul_packed_b", [](const te::Tensor& A, const te::Tensor& panels, const std::string& name) { return kiln::ops::matmul_packed_b(A, panels, name); },
          py::arg("A"), py::arg("panels"), py::arg("name") = "matmul",
          "A [..., M, K] times weights packed into panels [N/nb, K, nb]: [..., M, N] (the graph's kiln.MatMulPackedB).");
  ops.def("pad2d", &kiln::ops::pad2d, py::arg("X"), py::arg("pad_h"), py::arg("pad_w"), py::arg("name") = "pad");
  // The padding stage comes back too, so that it can be inlined or scheduled.
  ops.def("conv2d_nchw", [](const Tensor& X, const Tensor& W, int stride, int pad, int dilation, const std::string& name) {
    Tensor padded;
    Tensor out = kiln::ops::conv2d_nchw(X, W, stride, pad, dilation, name, &padded);
    return py::make_tuple(out, padded.defined() ? py::cast(padded) : py::none());
  }, py::arg("X"), py::arg("W"), py::arg("stride") = 1, py::arg("pad") = 0, py::arg("dilation") = 1, py::arg("name") = "conv",
     "Returns (output, padded input stage or None).");
  ops.def("conv2d_nchwc", [](const Tensor& X, const Tensor& W, int stride, int pad, const std::string& name) {
    Tensor padded;
    Tensor out = kiln::ops::conv2d_nchwc(X, W, stride, pad, name, &padded);
    return py::make_tuple(out, padded.defined() ? py::cast(padded) : py::none());
  }, py::arg("X"), py::arg("W"), py::arg("stride") = 1, py::arg("pad") = 0, py::arg("name") = "conv",
     "Blocked layouts: X [N, C/cb, H, W, cb], W [K/kb, C/cb, KH, KW, cb, kb], output [N, K/kb, OH, OW, kb]. Returns (output, padded input stage or None).");
  ops.def("channel_block", &kiln::ops::channel_block, py::arg("channels"), py::arg("preferred"),
          "The largest divisor of channels not above preferred (a block size for conv2d_nchwc).");
  ops.def("nchwc_blocks", [](int in_channels, int out_channels) {
    kiln::ops::NchwcBlocks b = kiln::ops::nchwc_blocks(in_channels, out_channels);
    return py::make_tuple(b.cb, b.kb);
  }, py::arg("in_channels"), py::arg("out_channels"), "conv2d_nchwc's default blocks (cb, kb) on the host: channel_block(C, lanes), channel_block(K, 2 * lanes).");
  ops.def("depthwise_conv2d_nchw", [](const Tensor& X, const Tensor& W, int stride, int pad, const std::string& name) {
    Tensor padded;
    Tensor out = kiln::ops::depthwise_conv2d_nchw(X, W, stride, pad, name, &padded);
    return py::make_tuple(out, padded.defined() ? py::cast(padded) : py::none());
  }, py::arg("X"), py::arg("W"), py::arg("stride") = 1, py::arg("pad") = 0, py::arg("name") = "dwconv", "Returns (output, padded input stage or None).");
  ops.def("max_pool2d", &kiln::ops::max_pool2d, py::arg("X"), py::arg("kernel"), py::arg("stride"), py::arg("pad") = 0, py::arg("name") = "maxpool");
  ops.def("avg_pool2d", &kiln::ops::avg_pool2d, py::arg("X"), py::arg("kernel"), py::arg("stride"), py::arg("name") = "avgpool");
  ops.def("softmax", &kiln::ops::softmax, py::arg("X"), py::arg("name") = "softmax");
  ops.def("layer_norm", &kiln::ops::layer_norm, py::arg("X"), py::arg("gamma"), py::arg("beta"), py::arg("eps") = 1e-5f, py::arg("name") = "layernorm");
  ops.def("transpose", &kiln::ops::transpose, py::arg("X"), py::arg("name") = "T");
  ops.def("add", &kiln::ops::add, py::arg("A"), py::arg("B"), py::arg("name") = "add");
  ops.def("relu", &kiln::ops::relu, py::arg("X"), py::arg("name") = "relu");
  ops.def("gelu", &kiln::ops::gelu, py::arg("X"), py::arg("name") = "gelu");
  ops.def("bias_add", &kiln::ops::bias_add, py::arg("X"), py::arg("bias"), py::arg("name") = "bias_add");
}

}  // namespace kiln::python
