// lift_parameters: a model's trainable constants as graph inputs, and in
// training mode its batch norms on batch statistics (autodiff.h).
#include <unordered_map>
#include <unordered_set>

#include "kiln/graph/autodiff.h"
#include "kiln/graph/rewrite.h"
#include "kiln/support/error.h"

namespace kiln::graph {
namespace {

// Constants some consumer reads at compile time (Reshape's shape ...) stay constants.
std::unordered_set<const NodeObj*> compile_time_constants(const Graph& g) {
  std::unordered_set<const NodeObj*> fixed;
  for (const OpNode* n : g.op_nodes())
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (n->inputs[i].defined() && n->op->reads_at_compile_time(static_cast<int>(i))) fixed.insert(n->inputs[i].node.get());
  return fixed;
}

bool is_batch_norm(const NodeObj& n) { return n.kind == NodeKind::Op && static_cast<const OpNode&>(n).op->name == "BatchNormalization"; }

// The running statistics (inputs 3 and 4) of the batch norms: buffers, not parameters.
std::unordered_set<const NodeObj*> running_statistics(const Graph& g) {
  std::unordered_set<const NodeObj*> stats;
  for (const OpNode* n : g.op_nodes())
    if (is_batch_norm(*n))
      for (int i : {3, 4})
        if (n->inputs[i].node->kind == NodeKind::Constant) stats.insert(n->inputs[i].node.get());
  return stats;
}

struct BatchNormTraining {
  Value y, running_mean, running_var;
};

// y = (x - mean) / sqrt(var + eps) * scale + B with the batch's mean and
// (biased) variance over every axis but 1; the running statistics move
// toward the batch's, the variance unbiased (as torch.nn.BatchNorm).
BatchNormTraining batch_norm_training(const OpNode& bn, const std::vector<Value>& in) {
  GradBuilder b(bn, {}, bn.name + "/train/");
  const TensorType& xt = in[0].type();
  std::vector<int64_t> axes{0}, channel(xt.ndim(), 1);
  for (int k = 2; k < xt.ndim(); ++k) axes.push_back(k);
  channel[1] = xt.shape[1];
  double count = static_cast<double>(xt.numel() / xt.shape[1]), momentum = bn.attrs.get_float("momentum");
  KILN_USER_CHECK(count > 1) << "BatchNormalization node '" << bn.name << "': training with batch statistics needs more than one value per channel; X is "
                             << xt.str();
  DataType t = xt.dtype;
  Value mean = b.reduce_mean(in[0], axes, true);
  Value xc = b.sub(in[0], mean);
  Value var = b.reduce_mean(b.mul(xc, xc), axes, true);
  Value rstd = b.op("Reciprocal", {b.op("Sqrt", {b.add(var, b.scalar(bn.attrs.get_float("epsilon"), t))})});
  BatchNormTraining r;
  r.y = b.add(b.mul(b.mul(xc, rstd), b.reshape(in[1], channel)), b.reshape(in[2], channel));
  std::vector<int64_t> c{xt.shape[1]};
  r.running_mean = b.add(b.scale(in[3], momentum), b.scale(b.reshape(mean, c), 1 - momentum));
  r.running_var = b.add(b.scale(in[4], momentum), b.scale(b.reshape(var, c), (1 - momentum) * count / (count - 1)));
  return r;
}

// Dropout(x, ratio?, training_mode?) -> kiln.Dropout(x, seed + k): the k-th
// dropout of the model draws its own masks; a zero ratio is the identity.
Value stochastic_dropout(const OpNode& d, const std::vector<Value>& in, const Value& seed, int k) {
  OpCall call = op_call(d);
  double ratio = 0.5;
  if (call.has_input(1)) ratio = *scalar_of(call.constant(1, "ratio"));
  if (ratio == 0) return in[0];
  GradBuilder b(d, {}, d.name + "/train/");
  Value s = k == 0 ? seed : b.add(seed, b.scalar(static_cast<double>(k) * 1000003.0, DataType::Int(64)));
  return b.op("kiln.Dropout", {in[0], s}, Attrs({{"ratio", ratio}}));
}

bool is_dropout(const NodeObj& n) { return n.kind == NodeKind::Op && static_cast<const OpNode&>(n).op->name == "Dropout"; }

std::string unique_name(const std::string& base, std::unordered_set<std::string>* taken) {
  std::string name = base;
  for (int k = 1; !taken->insert(name).second; ++k) name = base + "_" + std::to_string(k);
  return name;
}

}  // namespace

LiftedParameters lift_parameters(const Graph& graph, bool training) {
  std::unordered_set<const NodeObj*> fixed = compile_time_constants(graph);
  std::unordered_set<const NodeObj*> buffers = training ? running_statistics(graph) : std::unordered_set<const NodeObj*>{};
  std::unordered_map<const NodeObj*, std::vector<Value>> remap;
  std::unordered_set<std::string> taken;
  for (const auto& in : graph.inputs()) taken.insert(in->name);
  LiftedParameters lifted;
  std::vector<Ref<InputNode>> inputs = graph.inputs(), buffer_inputs;
  std::unordered_map<const NodeObj*, Value> update_of;  // buffer input -> its updated value
  auto mapped = [&](const Value& v) { return v.defined() && remap.count(v.node.get()) ? remap[v.node.get()][v.index] : v; };
  Ref<InputNode> seed;
  int dropouts = 0;
  if (training)
    for (const OpNode* n : graph.op_nodes())
      if (is_dropout(*n) && !seed.defined()) seed = make_input(unique_name("train.seed", &taken), {{}, DataType::Int(64)});
  for (const Ref<NodeObj>& n : graph.topo_order()) {
    bool buffer = buffers.count(n.get()) != 0;
    if (buffer || (n->kind == NodeKind::Constant && n->types[0].dtype.is_float() && n->types[0].ndim() >= 1 && !fixed.count(n.get()))) {
      Ref<InputNode> in = make_input(unique_name(n->name, &taken), n->types[0]);
      (buffer ? lifted.buffer_names : lifted.names).push_back(in->name);
      (buffer ? lifted.buffer_values : lifted.values).push_back(static_cast<const ConstantNode*>(n.get())->data);
      (buffer ? buffer_inputs : inputs).push_back(in);
      remap[n.get()] = {in->output()};
    } else if (n->kind == NodeKind::Op) {
      const auto& op = static_cast<const OpNode&>(*n);
      std::vector<Value> ins;
      bool changed = false;
      for (const Value& v : op.inputs) {
        ins.push_back(mapped(v));
        changed |= !(ins.back() == v);
      }
      if (training && is_batch_norm(op)) {
        BatchNormTraining bn = batch_norm_training(op, ins);
        remap[n.get()] = {bn.y};
        for (auto [stat, update] : {std::pair{ins[3], bn.running_mean}, std::pair{ins[4], bn.running_var}}) {
          if (stat.node->kind != NodeKind::Input || !update_of.emplace(stat.node.get(), update).second)
            KILN_USER_ERROR() << "BatchNormalization node '" << op.name << "': its running statistics must be constants of its own (not computed, not shared)";
        }
      } else if (training && is_dropout(op)) {
        remap[n.get()] = {stochastic_dropout(op, ins, seed->output(), dropouts++)};
        for (int k = 1; k < op.num_outputs(); ++k) remap[n.get()].push_back(op.output(k));  // the mask output stays unread
      } else if (changed) {
        Ref<OpNode> copy = with_inputs(op, std::move(ins));
        for (int k = 0; k < copy->num_outputs(); ++k) remap[n.get()].push_back(copy->output(k));
      }
    }
  }
  inputs.insert(inputs.end(), buffer_inputs.begin(), buffer_inputs.end());
  if (seed.defined()) {
    inputs.push_back(seed);
    lifted.seed_input = seed->name;
  }
  std::vector<Value> outs;
  std::vector<std::string> names = graph.output_names();
  for (const Value& v : graph.outputs()) outs.push_back(mapped(v));
  for (size_t k = 0; k < buffer_inputs.size(); ++k) {
    outs.push_back(update_of.at(buffer_inputs[k].get()));
    names.push_back("new." + lifted.buffer_names[k]);
  }
  lifted.graph = Graph::make(std::move(inputs), std::move(outs), std::move(names));
  return lifted;
}

}  // namespace kiln::graph
