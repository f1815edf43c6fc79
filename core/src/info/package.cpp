// package.cpp - a built package's graph described before it is saved, as `mobius info` describes a
// saved one (the same reader over the in-memory graph).
#include "info/info_model.hpp"
#include "save/package.hpp"

namespace mobius {

std::string ModelPackage::describe_json() const {
  using namespace info;
  Graph g;
  g.file = impl_->layout.graph;
  Problems problems;
  read_graph(finalized_model(*impl_), g, problems);
  if (impl_->layout.runtime == kRuntimeTransformersJs) g.tjs_dtype = tjs_dtype_of(g.file);
  json j = graph_json(g);
  // What only a saved folder has: the file's size, its producer and the external data files.
  j.erase("size");
  j.erase("producer");
  j.erase("external_data");
  return j.dump(2, ' ', true, json::error_handler_t::replace);
}

}  // namespace mobius
