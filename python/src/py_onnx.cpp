// kiln.graph's ONNX import: the bytes or the file of a model to a Graph.
// kiln/graph/importers.py's from_onnx and from_torch pick the entry point.
#include "kiln_py.h"

#ifdef KILN_PY_WITH_GRAPH

#include "kiln/graph/onnx.h"

namespace kiln::python {

void define_onnx(py::module_& root) {
  py::module_ m = root.attr("graph").cast<py::module_>();
  // shapes: input name -> sequence of ints (static) and str (shape variables).
  auto input_shapes = [](const py::dict& shapes) {
    graph::InputShapes out;
    for (auto [name, shape] : shapes) out[name.cast<std::string>()] = to_graph_shape(shape.cast<py::sequence>());
    return out;
  };
  m.def("from_onnx_bytes", [input_shapes](py::bytes bytes, const py::dict& shapes) {
    std::string data = bytes;  // the copy runs with the GIL held; the import does not need it
    graph::InputShapes given = input_shapes(shapes);
    py::gil_scoped_release release;
    return graph::from_onnx_bytes(data, given);
  }, py::arg("bytes"), py::arg("shapes") = py::dict(), "Imports a serialised ONNX ModelProto.");
  m.def("from_onnx_file", [input_shapes](const std::string& path, const py::dict& shapes) {
    graph::InputShapes given = input_shapes(shapes);
    py::gil_scoped_release release;
    return graph::from_onnx(path, given);
  }, py::arg("path"), py::arg("shapes") = py::dict(), "Imports the ONNX model in a file.");
}

}  // namespace kiln::python

#endif  // KILN_PY_WITH_GRAPH
