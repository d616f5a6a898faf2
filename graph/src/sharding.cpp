// Meshes and sharding specs: construction, printing, parsing, local shapes.
#include "kiln/graph/sharding.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "kiln/support/error.h"

namespace kiln::graph {

Mesh::Mesh(std::vector<std::pair<std::string, int>> axes) {
  KILN_USER_CHECK(!axes.empty()) << "a Mesh needs at least one axis, e.g. Mesh((\"data\", 2))";
  std::set<std::string> seen;
  for (auto& [name, size] : axes) {
    KILN_USER_CHECK(!name.empty() && seen.insert(name).second) << "Mesh axis names must be distinct and non-empty; got '" << name << "' twice or empty";
    KILN_USER_CHECK(size >= 1) << "Mesh axis '" << name << "' has size " << size << "; sizes must be >= 1";
    names_.push_back(name);
    sizes_.push_back(size);
  }
}

int Mesh::size() const {
  int n = 1;
  for (int s : sizes_) n *= s;
  return n;
}

int Mesh::axis(const std::string& name) const {
  for (int a = 0; a < ndim(); ++a)
    if (names_[a] == name) return a;
  KILN_USER_ERROR() << "the mesh " << str() << " has no axis '" << name << "'";
  return -1;
}

std::vector<int> Mesh::coords(int rank) const {
  std::vector<int> c(ndim());
  for (int a = ndim() - 1; a >= 0; --a) {
    c[a] = rank % sizes_[a];
    rank /= sizes_[a];
  }
  return c;
}

int Mesh::rank_of(const std::vector<int>& coords) const {
  int r = 0;
  for (int a = 0; a < ndim(); ++a) r = r * sizes_[a] + coords[a];
  return r;
}

std::string Mesh::str() const {
  std::ostringstream os;
  os << "Mesh(";
  for (int a = 0; a < ndim(); ++a) os << (a ? ", " : "") << names_[a] << "=" << sizes_[a];
  os << ")";
  return os.str();
}

bool ShardingSpec::is_replicated() const {
  if (!partial.empty()) return false;
  return std::all_of(dims.begin(), dims.end(), [](const auto& d) { return d.empty(); });
}

int ShardingSpec::dim_of_axis(int a) const {
  for (int d = 0; d < ndim(); ++d)
    if (std::find(dims[d].begin(), dims[d].end(), a) != dims[d].end()) return d;
  return -1;
}

bool ShardingSpec::is_partial(int a) const { return std::find(partial.begin(), partial.end(), a) != partial.end(); }

int64_t ShardingSpec::split_factor(int d, const Mesh& mesh) const {
  int64_t f = 1;
  for (int a : dims[d]) f *= mesh.axis_size(a);
  return f;
}

std::string ShardingSpec::str(const Mesh& mesh) const {
  std::ostringstream os;
  auto list = [&](const std::vector<int>& axes) {
    for (size_t i = 0; i < axes.size(); ++i) os << (i ? "," : "") << mesh.axis_name(axes[i]);
  };
  for (int d = 0; d < ndim(); ++d) {
    os << (d ? " " : "");
    if (dims[d].empty()) {
      os << "R";
    } else {
      os << "S(";
      list(dims[d]);
      os << ")";
    }
  }
  if (!partial.empty()) {
    os << (dims.empty() ? "" : " ") << "partial(";
    list(partial);
    os << ")";
  }
  if (dims.empty() && partial.empty()) os << "R";  // a scalar: replicated
  return os.str();
}

namespace {

std::vector<int> parse_axes(const std::string& inner, const Mesh& mesh) {
  std::vector<int> axes;
  std::stringstream ss(inner);
  std::string name;
  while (std::getline(ss, name, ',')) {
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    axes.push_back(mesh.axis(name));
  }
  return axes;
}

}  // namespace

ShardingSpec parse_spec(const std::string& text, const Mesh& mesh, int ndim, const std::string& what) {
  ShardingSpec spec;
  std::istringstream is(text);
  std::string tok;
  std::set<int> used;
  while (is >> tok) {
    auto open = tok.find('(');
    std::string head = tok.substr(0, open);
    KILN_USER_CHECK(tok == "R" || (open != std::string::npos && tok.back() == ')' && (head == "S" || head == "partial")))
        << "sharding spec of " << what << ": bad token '" << tok << "' in '" << text << "'; write one of R, S(axis[,axis]) per dimension, then optionally partial(axis)";
    std::vector<int> axes = tok == "R" ? std::vector<int>{} : parse_axes(tok.substr(open + 1, tok.size() - open - 2), mesh);
    for (int a : axes)
      KILN_USER_CHECK(used.insert(a).second) << "sharding spec of " << what << ": mesh axis '" << mesh.axis_name(a) << "' is used twice in '" << text << "'";
    if (head == "partial") {
      spec.partial.insert(spec.partial.end(), axes.begin(), axes.end());
    } else {
      KILN_USER_CHECK(spec.partial.empty()) << "sharding spec of " << what << ": partial(...) must come last in '" << text << "'";
      spec.dims.push_back(axes);
    }
  }
  // A scalar is written "R".
  if (ndim == 0 && spec.dims.size() == 1 && spec.dims[0].empty()) spec.dims.clear();
  KILN_USER_CHECK(spec.ndim() == ndim) << "sharding spec of " << what << ": '" << text << "' has " << spec.ndim() << " dimensions, the value has " << ndim;
  std::sort(spec.partial.begin(), spec.partial.end());
  return spec;
}

bool divides(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh) {
  for (int d = 0; d < spec.ndim(); ++d)
    if (shape[d] % spec.split_factor(d, mesh) != 0) return false;
  return true;
}

std::vector<int64_t> local_shape(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh, const std::string& what) {
  KILN_CHECK(static_cast<int>(shape.size()) == spec.ndim()) << what << ": spec rank " << spec.ndim() << " vs shape rank " << shape.size();
  std::vector<int64_t> out = shape;
  for (int d = 0; d < spec.ndim(); ++d) {
    int64_t f = spec.split_factor(d, mesh);
    KILN_USER_CHECK(shape[d] % f == 0) << what << ": dimension " << d << " (size " << shape[d] << ") cannot be split into " << f
                                       << " equal pieces (spec " << spec.str(mesh) << "); choose sizes divisible by the mesh axes";
    out[d] = shape[d] / f;
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> local_block(const std::vector<int64_t>& shape, const ShardingSpec& spec, const Mesh& mesh, int rank) {
  std::vector<int> c = mesh.coords(rank);
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int d = 0; d < spec.ndim(); ++d) {
    // Outer axes first: the block index is mixed-radix over the dim's axes.
    int64_t idx = 0;
    for (int a : spec.dims[d]) idx = idx * mesh.axis_size(a) + c[a];
    int64_t len = shape[d] / spec.split_factor(d, mesh);
    out.push_back({idx * len, len});
  }
  return out;
}

}  // namespace kiln::graph
