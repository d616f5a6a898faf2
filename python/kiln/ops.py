"""Compute definitions of common operators, from kiln's C++ operator library.

Layouts: NCHW images, OIHW convolution weights, row-major matrices. Each
function returns the output tensor (conv2d_nchw, conv2d_nchwc and
depthwise_conv2d_nchw return ``(output, padded)`` where ``padded`` is the
padding stage or None),
to be scheduled like any tensor made with :mod:`kiln.te`.
"""
from ._ffi import _kiln

_ops = _kiln.ops

matmul = _ops.matmul
batch_matmul = _ops.batch_matmul
matmul_packed_b = _ops.matmul_packed_b
pad2d = _ops.pad2d
conv2d_nchw = _ops.conv2d_nchw
conv2d_nchwc = _ops.conv2d_nchwc
channel_block = _ops.channel_block
nchwc_blocks = _ops.nchwc_blocks
depthwise_conv2d_nchw = _ops.depthwise_conv2d_nchw
max_pool2d = _ops.max_pool2d
avg_pool2d = _ops.avg_pool2d
softmax = _ops.softmax
layer_norm = _ops.layer_norm
transpose = _ops.transpose
add = _ops.add
relu = _ops.relu
gelu = _ops.gelu
bias_add = _ops.bias_add

__all__ = ["matmul", "batch_matmul", "pad2d", "conv2d_nchw", "conv2d_nchwc", "channel_block", "nchwc_blocks", "depthwise_conv2d_nchw", "max_pool2d", "avg_pool2d",
           "softmax", "layer_norm", "transpose", "add", "relu", "gelu", "bias_add"]
