// kiln.graph's ONNX import: the bytes or the file of a model to a Graph.
// kiln/graph/importers.py's from_onnx and from_torch pick the entry point.
#include "kiln_py.h"

#ifdef KILN_PY_WITH_GRAPH

#include "kiln/graph/onnx.h"

namespace kiln::python {

void define_onnx(py::module_& root) {
  py::module_ m = root.attr("graph").cast<py::module_>();
  m.def("from_onnx_bytes", [](py::bytes bytes, const graph::InputShapes& shapes) {
    std::string data = bytes;  // the copy runs with the GIL held; the import does not need it
    py::gil_scoped_release release;
    return graph::from_onnx_bytes(data, shapes);
  }, py::arg("bytes"), py::arg("shapes") = graph::InputShapes{}, "Imports a serialised ONNX ModelProto.");
  m.def("from_onnx_file", [](const std::string& path, const graph::InputShapes& shapes) {
    py::gil_scoped_release release;
    return graph::from_onnx(path, shapes);
  }, py::arg("path"), py::arg("shapes") = graph::InputShapes{}, "Imports the ONNX model in a file.");
}

}  // namespace kiln::python

#endif  // KILN_PY_WITH_GRAPH
