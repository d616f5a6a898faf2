// Pipeline stages (pipeline.h): a balanced contiguous partition of the ops,
// then one graph per stage with the values that cross its boundaries.
#include "kiln/dist/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "kiln/graph/autocast.h"
#include "kiln/graph/passes.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"

namespace kiln::dist {

using namespace graph;

namespace {

// Where each stage starts (bounds[s] .. bounds[s+1]) so that the costliest
// stage is as cheap as it can be: dynamic programming over prefixes.
std::vector<size_t> balanced_bounds(const std::vector<double>& t, int stages) {
  size_t n = t.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + t[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][i]: the least max-stage cost of the first i ops in k stages (each non-empty).
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<size_t>> from(stages + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (size_t i = k; i <= n; ++i)
      for (size_t j = k - 1; j < i; ++j) {
        double c = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (c < best[k][i]) best[k][i] = c, from[k][i] = j;
      }
  std::vector<size_t> bounds(stages + 1, n);
  for (int k = stages; k > 0; --k) bounds[k - 1] = from[k][bounds[k]];
  return bounds;
}

// Boundary values are named by their node ("Relu", "Split:1"); where several
// ops share a name, by its position among them too ("Relu#3").
struct ValueNamer {
  explicit ValueNamer(const std::vector<const OpNode*>& ops) {
    std::unordered_map<std::string, int> count;
    for (const OpNode* op : ops) ordinal[op] = count[op->name]++;
    for (const OpNode* op : ops) shared[op] = count[op->name] > 1;
  }
  std::string operator()(const Value& v) const {
    std::string n = v.node->name;
    auto it = shared.find(v.node.get());
    if (it != shared.end() && it->second) n += "#" + std::to_string(ordinal.at(v.node.get()));
    return v.node->num_outputs() == 1 ? n : n + ":" + std::to_string(v.index);
  }
  std::unordered_map<const NodeObj*, int> ordinal;
  std::unordered_map<const NodeObj*, bool> shared;
};

}  // namespace

PipelineCut cut_pipeline(const Graph& g, int num_stages, const CostParams& cost) {
  std::vector<const OpNode*> ops = g.op_nodes();
  KILN_USER_CHECK(num_stages >= 1) << "cut_pipeline: num_stages must be at least 1, got " << num_stages;
  KILN_USER_CHECK(static_cast<int>(ops.size()) >= num_stages)
      << "cut_pipeline: the graph has " << ops.size() << " operators, fewer than the " << num_stages
      << " stages asked for; use fewer ranks for the pipeline";
  std::vector<double> times = op_times(g, cost);
  ValueNamer value_name(ops);
  std::vector<size_t> bounds = balanced_bounds(times, num_stages);
  std::unordered_map<const NodeObj*, int> stage_of;
  for (int s = 0; s < num_stages; ++s)
    for (size_t i = bounds[s]; i < bounds[s + 1]; ++i) stage_of[ops[i]] = s;
  // The last stage that reads each op's value (graph outputs: past the last stage).
  std::unordered_map<const NodeObj*, int> last_reader;
  for (const OpNode* op : ops)
    for (const Value& v : op->inputs)
      if (v.defined() && v.node->kind == NodeKind::Op) last_reader[v.node.get()] = std::max(last_reader[v.node.get()], stage_of[op]);
  for (const Value& v : g.outputs())
    if (v.node->kind == NodeKind::Op) last_reader[v.node.get()] = num_stages;

  PipelineCut cut;
  std::vector<Value> carried;  // op values made before the stage that a later stage reads, in order
  for (int s = 0; s < num_stages; ++s) {
    PipelineStage st;
    std::unordered_map<const NodeObj*, std::vector<Value>> remap;  // old node -> its values in this stage's graph
    std::vector<Ref<InputNode>> inputs;
    for (const Value& v : carried) {
      auto in = make_input(value_name(v), v.type());
      inputs.push_back(in);
      st.recv.push_back(value_name(v));
      remap[v.node.get()].resize(v.node->num_outputs());
      // A value holding bfloat16 values is rounded again on arrival (exact: it changes no value), so
      // this stage's products still see bfloat16 operands and take the dot products (use_bf16_dot).
      remap[v.node.get()][v.index] = holds_bfloat16_values(v) ? round_through(in->output(), DataType::BFloat16()) : in->output();
    }
    auto value_in_stage = [&](const Value& v) -> Value {
      if (v.node->kind == NodeKind::Constant) return v;
      if (v.node->kind == NodeKind::Input) {
        auto it = remap.find(v.node.get());
        if (it != remap.end()) return it->second[0];
        auto in = make_input(v.node->name, v.type());
        inputs.push_back(in);
        st.model_inputs.push_back(v.node->name);
        remap[v.node.get()] = {in->output()};
        return in->output();
      }
      const std::vector<Value>& vs = remap.at(v.node.get());
      KILN_CHECK(v.index < static_cast<int>(vs.size()) && vs[v.index].defined()) << "cut_pipeline: value " << value_name(v) << " is not in stage " << s;
      return vs[v.index];
    };
    for (size_t i = bounds[s]; i < bounds[s + 1]; ++i) {
      std::vector<Value> in;
      for (const Value& v : ops[i]->inputs) in.push_back(v.defined() ? value_in_stage(v) : v);
      Ref<OpNode> n = with_inputs(*ops[i], in);
      std::vector<Value>& outs = remap[ops[i]];
      outs.clear();
      for (int o = 0; o < n->num_outputs(); ++o) outs.push_back(n->output(o));
      st.estimated_s += times[i];
    }
    st.num_ops = static_cast<int>(bounds[s + 1] - bounds[s]);
    // What the next stages read: the carried values still needed, then this stage's own.
    std::vector<Value> next;
    for (const Value& v : carried)
      if (last_reader[v.node.get()] > s) next.push_back(v);
    for (size_t i = bounds[s]; i < bounds[s + 1]; ++i)
      for (int o = 0; o < ops[i]->num_outputs(); ++o)
        if (last_reader.count(ops[i]) && last_reader[ops[i]] > s) next.push_back(ops[i]->output(o));
    std::vector<Value> outs;
    std::vector<std::string> names;
    if (s + 1 < num_stages) {
      for (const Value& v : next) {
        outs.push_back(value_in_stage(v));
        names.push_back(value_name(v));
      }
      st.send = names;
    } else {
      for (const Value& v : g.outputs()) outs.push_back(value_in_stage(v));
      names = g.output_names();
    }
    st.graph = Graph::make(inputs, outs, names);
    carried = next;
    cut.stages.push_back(std::move(st));
  }
  return cut;
}

std::string PipelineCut::str() const {
  std::ostringstream os;
  double total = 0, slowest = 0;
  for (const PipelineStage& s : stages) total += s.estimated_s, slowest = std::max(slowest, s.estimated_s);
  char buf[128];
  std::snprintf(buf, sizeof(buf), "# pipeline of %zu stages; slowest stage / mean = %.2f\n", stages.size(),
                stages.empty() || total == 0 ? 1.0 : slowest / (total / double(stages.size())));
  os << buf;
  for (size_t i = 0; i < stages.size(); ++i) {
    const PipelineStage& s = stages[i];
    std::snprintf(buf, sizeof(buf), "# stage %zu: %d ops, estimated %.3f ms", i, s.num_ops, s.estimated_s * 1e3);
    os << buf;
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      os << "; " << what << " ";
      for (size_t k = 0; k < v.size(); ++k) os << (k ? ", " : "") << v[k];
    };
    list("receives", s.recv);
    list("reads", s.model_inputs);
    list("sends", s.send);
    os << "\n";
  }
  return os.str();
}

}  // namespace kiln::dist
