// The graph text parser (see parse.h). Two steps: each line becomes a node
// with its input references as numbers; once every line is read, the
// references are checked and linked (a node may name a later one).
#include "lowering/ir/parse.h"

#include <cctype>
#include <charconv>

namespace disc::ir {

namespace {

constexpr DType kAllDTypes[] = {
    DType::kBool,    DType::kUInt8,    DType::kInt8,    DType::kInt16,
    DType::kInt32,   DType::kInt64,    DType::kFloat16, DType::kBFloat16,
    DType::kFloat32, DType::kFloat64,  DType::kComplex64, DType::kComplex128,
};

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool number_char(char c) { return word_char(c) || c == '.' || c == '+' || c == '-'; }

// A cursor over one line; every error names the line and the token at hand.
class Line {
 public:
  Line(std::string_view text, int number) : s_(text), line_(number) {}

  [[noreturn]] void fail(const std::string& what) const { throw ParseError(line_, what); }
  // The token at the cursor, for error messages.
  std::string token() {
    skip_ws();
    if (pos_ >= s_.size()) return "end of line";
    size_t end = pos_;
    while (end < s_.size() && (number_char(s_[end]) || s_[end] == '%' || s_[end] == ':')) ++end;
    if (end == pos_) ++end;
    return "'" + std::string(s_.substr(pos_, end - pos_)) + "'";
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }
  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool eat(std::string_view lit) {
    skip_ws();
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }
  void expect(std::string_view lit) {
    if (!eat(lit)) fail("expected '" + std::string(lit) + "', found " + token());
  }
  // Letters, digits and '_' (and "::" / '.' inside op names when asked).
  std::string_view word(bool op_name = false) {
    skip_ws();
    size_t start = pos_;
    while (pos_ < s_.size() && (word_char(s_[pos_]) || (op_name && (s_[pos_] == ':' || s_[pos_] == '.'))))
      ++pos_;
    return s_.substr(start, pos_ - start);
  }
  int64_t integer(const char* what) {
    skip_ws();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
    if (ec != std::errc() || (end < s_.data() + s_.size() && word_char(*end)))
      fail(std::string("expected ") + what + ", found " + token());
    pos_ = static_cast<size_t>(end - s_.data());
    return v;
  }
  // An int ("3", "-1") or a double ("1.0", "1e-05", "-inf", "nan").
  Attr number() {
    skip_ws();
    size_t end = pos_;
    while (end < s_.size() && number_char(s_[end])) ++end;
    std::string_view text = s_.substr(pos_, end - pos_);
    std::string_view body = text.substr(!text.empty() && (text[0] == '-' || text[0] == '+'));
    bool is_int = !body.empty();
    for (char c : body) is_int = is_int && std::isdigit(static_cast<unsigned char>(c));
    Attr a;
    const char* first = text.data() + (text.substr(0, 1) == "+");
    std::from_chars_result r;
    if (is_int) {
      a.kind = Attr::Kind::kInt;
      r = std::from_chars(first, text.data() + text.size(), a.i);
    } else {
      a.kind = Attr::Kind::kDouble;
      r = std::from_chars(first, text.data() + text.size(), a.d);
    }
    if (r.ec != std::errc() || r.ptr != text.data() + text.size())
      fail("bad number '" + std::string(text) + "'");
    pos_ = end;
    return a;
  }
  DType dtype() {
    size_t start = (skip_ws(), pos_);
    std::string_view w = word();
    for (DType t : kAllDTypes)
      if (!w.empty() && dtype_name(t) == w) return t;
    pos_ = start;
    fail("unknown dtype " + token());
  }
  // "float32[8,16]" or "undefined".
  TensorType type() {
    skip_ws();
    if (eat("undefined")) return {DType::kFloat32, {}, true};
    TensorType t;
    t.dtype = dtype();
    expect("[");
    while (!eat("]")) {
      if (!t.sizes.empty()) expect(",");
      t.sizes.push_back(integer("a size"));
    }
    return t;
  }
  // "%3.1"
  GraphRef ref() {
    expect("%");
    auto node = integer("a node number");
    expect(".");
    auto index = integer("an output index");
    if (node < 0 || index < 0) fail("negative reference %" + std::to_string(node));
    return {static_cast<uint32_t>(node), static_cast<uint32_t>(index)};
  }
  std::vector<GraphRef> refs() {
    std::vector<GraphRef> out;
    expect("(");
    while (!eat(")")) {
      if (!out.empty()) expect(",");
      out.push_back(ref());
    }
    return out;
  }
  Attr attr();
  Attr list();
  std::string string_literal();

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_;
};

std::string Line::string_literal() {
  expect("\"");
  std::string out;
  while (pos_ < s_.size() && s_[pos_] != '"') {
    char c = s_[pos_++];
    if (c == '\\' && pos_ < s_.size()) {
      c = s_[pos_++];
      if (c == 'n') c = '\n';
    }
    out += c;
  }
  if (pos_ >= s_.size()) fail("unterminated string");
  ++pos_;
  return out;
}

// [1, 2] / [True, False] / [0.5, 1.0]; [] is an empty int list.
Attr Line::list() {
  expect("[");
  Attr a;
  a.kind = Attr::Kind::kIntList;
  bool first = true;
  while (!eat("]")) {
    if (!first) expect(",");
    Attr e = attr();
    Attr::Kind k = e.kind == Attr::Kind::kInt      ? Attr::Kind::kIntList
                   : e.kind == Attr::Kind::kBool   ? Attr::Kind::kBoolList
                   : e.kind == Attr::Kind::kDouble ? Attr::Kind::kDoubleList
                                                   : Attr::Kind::kNone;
    if (k == Attr::Kind::kNone || e.symbolic) fail("a list holds ints, bools or floats, found " + e.to_string());
    if (!first && k != a.kind) fail("mixed list element " + e.to_string());
    a.kind = k;
    if (k == Attr::Kind::kDoubleList) a.doubles.push_back(e.d);
    else a.ints.push_back(e.i);
    first = false;
  }
  return a;
}

Attr Line::attr() {
  char c = peek();
  if (c == '[') return list();
  if (c == '"') {
    Attr a;
    a.kind = Attr::Kind::kString;
    a.s = string_literal();
    return a;
  }
  if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+') return number();
  size_t start = pos_;
  std::string_view w = word();
  using K = Attr::Kind;
  if (w == "None") return Attr::none();
  if (w == "True" || w == "False") return Attr::of_int(K::kBool, w == "True");
  if (w == "device") return Attr::of_int(K::kDevice, 0);
  if (w == "inf" || w == "nan") {
    pos_ = start;
    return number();
  }
  if (w == "bool" || w == "float") {  // empty typed lists: bool[] / float[]
    expect("[");
    expect("]");
    Attr a;
    a.kind = w == "bool" ? K::kBoolList : K::kDoubleList;
    return a;
  }
  if (w == "Scalar") {
    expect("(");
    Attr a = attr();
    expect(")");
    if (a.kind == K::kInt) a.kind = K::kScalarInt;
    else if (a.kind == K::kDouble) a.kind = K::kScalarDouble;
    else if (a.kind == K::kBool) a.kind = K::kScalarBool;
    else fail("Scalar(...) holds an int, float or bool, found " + a.to_string());
    return a;
  }
  if (w == "sym") {  // a value derived from sizes: sym[8, 16], sym(8)
    Attr a;
    if (peek() == '[') {
      a = list();
      if (a.kind != K::kIntList) fail("sym[...] holds ints");
    } else {
      expect("(");
      a = attr();
      expect(")");
      if (a.kind != K::kInt && a.kind != K::kScalarInt) fail("sym(...) holds an int, found " + a.to_string());
    }
    a.symbolic = true;
    return a;
  }
  for (DType t : kAllDTypes)
    if (!w.empty() && dtype_name(t) == w) return Attr::of_int(K::kDType, static_cast<int64_t>(t));
  pos_ = start;
  fail("unknown attribute " + token());
}

// One "%k = ..." line, before its references are linked.
struct PendingNode {
  int line;
  NodePtr node;
  std::vector<GraphRef> inputs;
  int32_t param = -1;
};

// op(operands) -> (outputs) [rng(seed, offset)]  inputs(refs)
void parse_op(Line& l, std::string_view name, PendingNode& p) {
  Node& n = *p.node;
  n.op = intern_op(name);
  l.expect("(");
  std::vector<Attr> rng;
  while (!l.eat(")")) {
    if (!n.operands.empty()) l.expect(",");
    const auto attrs = static_cast<uint32_t>(n.attrs.size());
    const auto runtime = static_cast<uint32_t>(n.runtime.size());
    if (l.eat("%in")) {
      n.operands.push_back({Operand::Kind::kTensor, static_cast<uint32_t>(l.integer("an input number")), 1});
    } else if (l.eat("[%in")) {
      Operand o{Operand::Kind::kTensorList, static_cast<uint32_t>(l.integer("an input number")), 0};
      l.expect("..+");
      o.count = static_cast<uint32_t>(l.integer("a count"));
      if (l.eat("of")) {
        o.kind = Operand::Kind::kOptionalTensorList;
        o.mask = attrs;
        n.attrs.push_back(l.list());
        if (n.attrs.back().kind != Attr::Kind::kBoolList && !n.attrs.back().ints.empty())
          l.fail("the mask of an optional tensor list is a bool list");
        n.attrs.back().kind = Attr::Kind::kBoolList;
      }
      l.expect("]");
      n.operands.push_back(o);
    } else if (l.eat("$[")) {
      Operand o{Operand::Kind::kRuntimeList, runtime, 0};
      while (!l.eat("]")) {
        if (o.count) l.expect(",");
        n.runtime.push_back(l.attr());
        ++o.count;
      }
      n.operands.push_back(o);
    } else if (l.eat("$")) {
      n.runtime.push_back(l.attr());
      n.operands.push_back({Operand::Kind::kRuntime, runtime, 1});
    } else {
      n.attrs.push_back(l.attr());
      n.operands.push_back({Operand::Kind::kAttr, attrs, 1});
    }
  }
  l.expect("->");
  l.expect("(");
  while (!l.eat(")")) {
    if (!n.outputs.empty()) l.expect(",");
    if (l.eat("%in")) {
      n.mutated.push_back(static_cast<uint32_t>(l.integer("an input number")));
      l.expect(":=");
    } else if (!n.mutated.empty()) {
      l.fail("a return after a written input: returns come first");
    }
    n.outputs.push_back(l.type());
  }
  n.num_returns = static_cast<uint32_t>(n.outputs.size() - n.mutated.size());
  // Seed and offset of a random op follow the operands' runtime values.
  if (l.eat("rng")) {
    l.expect("(");
    n.rng_runtime = static_cast<int32_t>(n.runtime.size());
    n.runtime.push_back(Attr::of_int(Attr::Kind::kInt, l.integer("a seed")));
    l.expect(",");
    n.runtime.push_back(Attr::of_int(Attr::Kind::kInt, l.integer("an offset")));
    l.expect(")");
  }
  l.expect("inputs");
  p.inputs = l.refs();
  for (const Operand& o : n.operands) {
    bool tensors = o.kind == Operand::Kind::kTensor || o.kind == Operand::Kind::kTensorList ||
                   o.kind == Operand::Kind::kOptionalTensorList;
    if (tensors && o.first + o.count > p.inputs.size())
      l.fail("operand %in" + std::to_string(o.first + o.count - 1) + " but the node has " +
             std::to_string(p.inputs.size()) + " inputs");
  }
}

// graph(hash=..., params=N); both keys optional. Returns N or -1.
int64_t parse_header(Line& l) {
  if (l.word() != "graph") l.fail("expected 'graph(...)' before the nodes");
  int64_t params = -1;
  if (!l.eat("(")) return params;
  bool first = true;
  while (!l.eat(")")) {
    if (!first) l.expect(",");
    first = false;
    std::string_view key = l.word();
    l.expect("=");
    if (key == "params") params = l.integer("a parameter count");
    else if (key == "hash") l.word();  // recomputed from the nodes
    else l.fail("unknown graph key '" + std::string(key) + "'");
  }
  return params;
}

}  // namespace

ParsedGraph::~ParsedGraph() {
  for (const NodePtr& n : nodes) n->inputs.clear();
}

ParsedGraph parse_graph(std::string_view text) {
  std::vector<PendingNode> pending;
  std::vector<GraphRef> outputs;
  int64_t declared_params = -1;
  int header_line = 0, return_line = 0, last_line = 0;
  int32_t params = 0;
  size_t start = 0;
  for (int number = 1; start <= text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    Line l(text.substr(start, end - start), number);
    start = end + 1;
    last_line = number;
    if (l.at_end() || l.peek() == '#') continue;
    if (return_line) l.fail("text after 'return', found " + l.token());
    if (!header_line) {
      declared_params = parse_header(l);
      header_line = number;
    } else if (l.eat("return")) {
      outputs = l.refs();
      return_line = number;
    } else {
      const auto k = static_cast<int64_t>(pending.size());
      l.expect("%");
      if (l.integer("a node number") != k) l.fail("expected node %" + std::to_string(k) + " next");
      l.expect("=");
      PendingNode p{number, nullptr, {}, -1};
      std::string_view op = l.word(/*op_name=*/true);
      if (op.empty()) l.fail("expected an op name, found " + l.token());
      if (op == "param") {
        if (l.integer("a parameter number") != params)
          l.fail("expected param " + std::to_string(params) + " next");
        l.expect(":");
        p.param = params++;
        p.node = make_data_node(l.type(), std::make_shared<Payload>());
      } else {
        p.node = std::make_shared<Node>();
        parse_op(l, op, p);
        p.node->finalize();
      }
      pending.push_back(std::move(p));
    }
    if (!l.at_end()) l.fail("unexpected " + l.token() + " at the end of the line");
  }
  if (!header_line) throw ParseError(last_line, "no graph: expected 'graph(...)'");
  if (!return_line) throw ParseError(last_line, "the graph has no 'return (...)' line");
  if (declared_params >= 0 && declared_params != params)
    throw ParseError(header_line, "params=" + std::to_string(declared_params) + " but the graph has " +
                                      std::to_string(params));

  ParsedGraph out;
  auto check = [&](int line, const GraphRef& r) {
    if (r.node >= pending.size())
      throw ParseError(line, "unknown value '%" + std::to_string(r.node) + "." + std::to_string(r.index) + "'");
    if (r.index >= pending[r.node].node->outputs.size())
      throw ParseError(line, "'%" + std::to_string(r.node) + "." + std::to_string(r.index) + "': %" +
                                 std::to_string(r.node) + " has " +
                                 std::to_string(pending[r.node].node->outputs.size()) + " outputs");
  };
  for (PendingNode& p : pending) {
    for (const GraphRef& r : p.inputs) {
      check(p.line, r);
      p.node->inputs.push_back({pending[r.node].node, r.index});
    }
  }
  for (const GraphRef& r : outputs) check(return_line, r);
  for (PendingNode& p : pending) {
    if (p.param >= 0) out.graph.params.push_back(static_cast<uint32_t>(out.graph.nodes.size()));
    out.graph.nodes.push_back({p.node.get(), std::move(p.inputs), p.param});
    out.nodes.push_back(std::move(p.node));
  }
  out.graph.outputs = std::move(outputs);
  hash_graph(out.graph);
  return out;
}

}  // namespace disc::ir
