// unpickler.cpp - the restricted, non-executing unpickler of torch.save's data.pkl.
//
// Unpickling is code execution in Python, so nothing here ever runs anything: the pickle is
// interpreted by a small stack machine that knows a fixed set of opcodes and a fixed set of
// globals (those torch.load(weights_only=True) needs for a state dict) and builds a tree of plain
// values. Anything else is rejected at the opcode or global that introduces it, before it could
// act.
#include "checkpoint/unpickler.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <utility>

#include "checkpoint/checkpoint_files.hpp"
#include "checkpoint/pickle_vocab.hpp"
#include "mobius/plugin.h"

namespace mobius {
namespace {

// Limits. Real state dicts are far below all of them; they exist so that a hostile file costs
// bounded time and memory.
constexpr size_t kMaxMarkDepth = 100;    // MARKs open at once
constexpr uint8_t kMaxValueDepth = 100;  // containers inside containers
constexpr uint32_t kMaxMemo = 1u << 20;
constexpr uint64_t kMaxString = uint64_t{16} << 20;
constexpr size_t kMaxRank = 64;
constexpr size_t kMaxTensors = 1u << 20;
constexpr size_t kMaxStack = 1u << 20;
// Everything the unpickler allocates is charged against this budget: a 64 MiB pickle of
// one-byte EMPTY_LIST opcodes would otherwise cost gigabytes of objects.
constexpr uint64_t kMaxWorkingBytes = uint64_t{512} << 20;
constexpr size_t kMaxGlobalLine = 256;

[[noreturn]] void fail(const std::string& file, const std::string& reason) {
  kPytorchFormat.fail(file, reason);
}

std::string hex_byte(uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

bool valid_utf8(const uint8_t* s, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

using pickle::global_text;
using pickle::GlobalId;
using pickle::kGlobalOrderedDict;
using pickle::kGlobalRebuildParameter;
using pickle::kGlobalRebuildTensor;
using pickle::kGlobalStorage0;
using pickle::kNumStorageTypes;
using pickle::kStorageTypes;
using pickle::opcode_name;

// Values of the pickle's object graph. Scalars are held inline; strings, containers and
// tensors live in the unpickler's tables and are referred to by index, so shared references
// (the memo) and even cycles cost nothing and are never walked recursively.
enum class Kind : uint8_t {
  None,
  Bool,
  Int,
  Float,
  Str,
  Tuple,
  List,
  Dict,
  Global,
  Storage,
  Tensor
};

struct Ref {
  Kind kind = Kind::None;
  int64_t v = 0;  // bool/int value, float bits, table index or GlobalId
};

struct Seq {  // a tuple or a list
  std::vector<Ref> items;
  uint8_t depth = 1;
};

struct DictObj {
  std::vector<std::pair<Ref, Ref>> items;  // in insertion order; duplicates kept
  bool ordered = false;                    // an OrderedDict
  uint8_t depth = 1;
};

struct TensorObj {
  size_t storage = 0;
  uint64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
};

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t n, const std::string& display)
      : data_(data), n_(n), display_(display) {}

  TorchPickle run() {
    if (n_ > kMaxPickleBytes) {
      fail(display_, "data.pkl is " + std::to_string(n_) + " bytes, over the 64 MiB limit");
    }
    for (;;) {
      if (pos_ >= n_) bad_at(n_, "the pickle ends without STOP");
      op_pos_ = pos_;
      op_ = data_[pos_++];
      if (step()) break;
    }
    if (pos_ != n_) {
      bad_at(pos_, std::to_string(n_ - pos_) + " bytes follow STOP");
    }
    return finish(stack_.back());
  }

 private:
  // Executes one opcode; true after STOP.
  bool step() {
    switch (op_) {
      case 0x80: {  // PROTO
        const uint8_t v = take(1)[0];
        if (v > 5) bad("unsupported pickle protocol " + std::to_string(v));
        return false;
      }
      case 0x95: {  // FRAME: framing only groups opcodes; its length must still be honest
        const uint64_t len = le64(take(8));
        if (len > n_ - pos_) {
          bad("frame of " + std::to_string(len) + " bytes extends beyond the pickle");
        }
        return false;
      }
      case '.': {  // STOP
        if (!marks_.empty()) bad("a MARK is still open");
        if (stack_.size() != 1) {
          bad("expected one value on the stack, found " + std::to_string(stack_.size()));
        }
        return true;
      }
      case '(':
        if (marks_.size() >= kMaxMarkDepth) {
          bad("MARKs nested deeper than " + std::to_string(kMaxMarkDepth));
        }
        marks_.push_back(stack_.size());
        return false;
      case '}': push(new_dict(false)); return false;
      case ']': push(new_seq(Kind::List, {})); return false;
      case ')': push(new_seq(Kind::Tuple, {})); return false;
      case 'N': push(Ref{Kind::None, 0}); return false;
      case 0x88: push(Ref{Kind::Bool, 1}); return false;
      case 0x89: push(Ref{Kind::Bool, 0}); return false;
      case 'J': {
        const uint32_t u = le32(take(4));
        push(Ref{Kind::Int, static_cast<int32_t>(u)});
        return false;
      }
      case 'K': push(Ref{Kind::Int, take(1)[0]}); return false;
      case 'M': push(Ref{Kind::Int, le16(take(2))}); return false;
      case 0x8a: {  // LONG1: little-endian two's complement
        const uint8_t len = take(1)[0];
        if (len > 8) bad("integer of " + std::to_string(len) + " bytes does not fit in 64 bits");
        const uint8_t* b = take(len);
        uint64_t u = 0;
        for (size_t i = 0; i < len; ++i) u |= static_cast<uint64_t>(b[i]) << (8 * i);
        if (len > 0 && len < 8 && (b[len - 1] & 0x80)) u |= ~uint64_t{0} << (8 * len);
        push(Ref{Kind::Int, static_cast<int64_t>(u)});
        return false;
      }
      case 'G': {  // BINFLOAT: big-endian IEEE double
        const uint8_t* b = take(8);
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | b[i];
        push(Ref{Kind::Float, static_cast<int64_t>(u)});
        return false;
      }
      case 0x8c: push(read_string(take(1)[0])); return false;
      case 'X': push(read_string(le32(take(4)))); return false;
      case 0x8d: push(read_string(le64(take(8)))); return false;
      case 'q': put(take(1)[0]); return false;
      case 'r': put(le32(take(4))); return false;
      case 0x94: put(memo_count_); return false;
      case 'h': push(get(take(1)[0])); return false;
      case 'j': push(get(le32(take(4)))); return false;
      case 't': push(new_seq(Kind::Tuple, pop_mark())); return false;
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t k = op_ - 0x84u;
        need(k);
        std::vector<Ref> items(stack_.end() - static_cast<ptrdiff_t>(k), stack_.end());
        stack_.resize(stack_.size() - k);
        push(new_seq(Kind::Tuple, std::move(items)));
        return false;
      }
      case 'a': {
        need(2);
        const Ref item = pop();
        append(stack_.back(), &item, 1);
        return false;
      }
      case 'e': {
        std::vector<Ref> items = pop_mark();
        need(1);
        append(stack_.back(), items.data(), items.size());
        return false;
      }
      case 's': {
        need(3);
        const Ref value = pop();
        const Ref key = pop();
        const std::pair<Ref, Ref> kv{key, value};
        set_items(stack_.back(), &kv, 1);
        return false;
      }
      case 'u': {
        std::vector<Ref> items = pop_mark();
        if (items.size() % 2) bad("odd number of values (" + std::to_string(items.size()) + ")");
        need(1);
        std::vector<std::pair<Ref, Ref>> kvs;
        kvs.reserve(items.size() / 2);
        for (size_t i = 0; i < items.size(); i += 2) kvs.emplace_back(items[i], items[i + 1]);
        set_items(stack_.back(), kvs.data(), kvs.size());
        return false;
      }
      case 'c': {
        const std::string module = read_line("module");
        const std::string name = read_line("name");
        push(resolve_global(module, name));
        return false;
      }
      case 0x93: {  // STACK_GLOBAL
        need(2);
        const Ref name = pop();
        const Ref module = pop();
        if (module.kind != Kind::Str || name.kind != Kind::Str) {
          bad("module and name must be strings, got " + kind_text(module) + " and " +
              kind_text(name));
        }
        push(resolve_global(strs_[module.v], strs_[name.v]));
        return false;
      }
      case 'R': {
        need(2);
        const Ref args = pop();
        const Ref callable = pop();
        push(reduce(callable, args));
        return false;
      }
      case 'b': {
        need(2);
        const Ref state = pop();
        build(stack_.back(), state);
        return false;
      }
      case 'Q': {
        need(1);
        push(persistent_load(pop()));
        return false;
      }
      default: {
        const char* name = opcode_name(op_);
        if (!name) bad("unknown opcode " + hex_byte(op_));
        bad("opcode is not allowed (only the opcodes of a plain state dict are accepted)");
      }
    }
  }

  // --- errors

  std::string op_text() const {
    const char* name = opcode_name(op_);
    return std::string(name ? name : "opcode") + " (" + hex_byte(op_) + ") at offset " +
           std::to_string(op_pos_);
  }
  [[noreturn]] void bad(const std::string& reason) const {
    fail(display_, "data.pkl: " + op_text() + ": " + reason);
  }
  [[noreturn]] void bad_at(size_t offset, const std::string& reason) const {
    fail(display_, "data.pkl: at offset " + std::to_string(offset) + ": " + reason);
  }
  [[noreturn]] void bad_result(const std::string& reason) const {
    fail(display_, "data.pkl: " + reason);
  }

  std::string kind_text(const Ref& r) const {
    switch (r.kind) {
      case Kind::None: return "None";
      case Kind::Bool: return "a bool";
      case Kind::Int: return "an int";
      case Kind::Float: return "a float";
      case Kind::Str: return "a string";
      case Kind::Tuple: return "a tuple";
      case Kind::List: return "a list";
      case Kind::Dict: return dicts_[r.v].ordered ? "an OrderedDict" : "a dict";
      case Kind::Global: return "global '" + global_text(r.v) + "'";
      case Kind::Storage: return "a storage";
      case Kind::Tensor: return "a tensor";
    }
    return "a value";
  }

  // --- reading the byte stream

  const uint8_t* take(uint64_t k) {
    if (k > n_ - pos_) {
      bad("needs " + std::to_string(k) + " bytes but only " + std::to_string(n_ - pos_) +
          " remain");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(k);
    return p;
  }

  Ref read_string(uint64_t len) {
    if (len > kMaxString) {
      bad("string of " + std::to_string(len) + " bytes exceeds the 16 MiB limit");
    }
    if (len > n_ - pos_) {
      bad("string of " + std::to_string(len) + " bytes extends beyond the end of the pickle (" +
          std::to_string(n_ - pos_) + " bytes remain)");
    }
    const uint8_t* p = take(len);
    if (!valid_utf8(p, static_cast<size_t>(len))) bad("string is not valid UTF-8");
    charge(32 + len);
    strs_.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
    return Ref{Kind::Str, static_cast<int64_t>(strs_.size() - 1)};
  }

  std::string read_line(const char* what) {
    const size_t limit = std::min(n_ - pos_, kMaxGlobalLine + 1);
    const void* nl = std::memchr(data_ + pos_, '\n', limit);
    if (!nl) bad(std::string(what) + " is not a line of at most 256 bytes");
    const size_t len = static_cast<const uint8_t*>(nl) - (data_ + pos_);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len + 1;
    return s;
  }

  // --- the stack

  void charge(uint64_t bytes) {
    used_ += bytes;
    if (used_ > kMaxWorkingBytes) bad("unpickling needs more than 512 MiB of memory");
  }

  // Values above the innermost MARK.
  size_t available() const { return stack_.size() - (marks_.empty() ? 0 : marks_.back()); }
  void need(size_t k) const {
    if (available() < k) {
      bad("stack underflow: needs " + std::to_string(k) + " values, " +
          std::to_string(available()) + " available above the mark");
    }
  }
  void push(Ref r) {
    if (stack_.size() >= kMaxStack) {
      bad("the stack grows beyond " + std::to_string(kMaxStack) + " values");
    }
    stack_.push_back(r);
  }
  Ref pop() {
    need(1);
    const Ref r = stack_.back();
    stack_.pop_back();
    return r;
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) bad("no MARK to pop");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // --- the memo

  void put(uint64_t index) {
    if (index >= kMaxMemo) {
      bad("memo index " + std::to_string(index) + " exceeds the limit of " +
          std::to_string(kMaxMemo) + " entries");
    }
    need(1);
    if (index >= memo_.size()) {
      charge((index + 1 - memo_.size()) * sizeof(Ref));
      memo_.resize(static_cast<size_t>(index + 1), Ref{kUnset, 0});
    }
    if (memo_[index].kind == kUnset) ++memo_count_;
    memo_[index] = stack_.back();
  }
  Ref get(uint64_t index) const {
    if (index >= memo_.size() || memo_[index].kind == kUnset) {
      bad("memo index " + std::to_string(index) + " was never stored");
    }
    return memo_[index];
  }

  // --- values

  uint8_t depth(const Ref& r) const {
    switch (r.kind) {
      case Kind::Tuple:
      case Kind::List: return seqs_[r.v].depth;
      case Kind::Dict: return dicts_[r.v].depth;
      default: return 0;
    }
  }
  // Depth is tracked as containers are filled. A list mutated after it was put into another
  // container does not update its parents, but nothing here walks values recursively, so the
  // limit is a guard against absurd pickles rather than against stack exhaustion.
  uint8_t deeper(uint8_t current, const Ref& child) const {
    const unsigned d = depth(child) + 1u;
    if (d > kMaxValueDepth) bad("values nested deeper than " + std::to_string(kMaxValueDepth));
    return static_cast<uint8_t>(std::max<unsigned>(current, d));
  }

  Ref new_seq(Kind kind, std::vector<Ref> items) {
    charge(64 + items.size() * sizeof(Ref));
    Seq s;
    for (const Ref& r : items) s.depth = deeper(s.depth, r);
    s.items = std::move(items);
    seqs_.push_back(std::move(s));
    return Ref{kind, static_cast<int64_t>(seqs_.size() - 1)};
  }
  Ref new_dict(bool ordered) {
    charge(64);
    dicts_.push_back(DictObj{{}, ordered, 1});
    return Ref{Kind::Dict, static_cast<int64_t>(dicts_.size() - 1)};
  }

  void append(const Ref& target, const Ref* items, size_t k) {
    if (target.kind != Kind::List) bad("cannot append to " + kind_text(target));
    charge(k * sizeof(Ref));
    Seq& s = seqs_[target.v];
    for (size_t i = 0; i < k; ++i) {
      s.depth = deeper(s.depth, items[i]);
      s.items.push_back(items[i]);
    }
  }

  void set_items(const Ref& target, const std::pair<Ref, Ref>* kvs, size_t k) {
    if (target.kind != Kind::Dict) bad("cannot set items on " + kind_text(target));
    charge(k * 2 * sizeof(Ref));
    DictObj& dict = dicts_[target.v];
    for (size_t i = 0; i < k; ++i) {
      dict.depth = deeper(deeper(dict.depth, kvs[i].first), kvs[i].second);
      dict.items.push_back(kvs[i]);
    }
  }

  // find_class of the weights-only unpickler: an allowlist, checked when the global is named so
  // that nothing outside it is ever even looked up.
  Ref resolve_global(const std::string& module, const std::string& name) {
    if (module == "collections" && name == "OrderedDict") {
      return Ref{Kind::Global, kGlobalOrderedDict};
    }
    if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      return Ref{Kind::Global, kGlobalRebuildTensor};
    }
    if (module == "torch._utils" && name == "_rebuild_parameter") {
      return Ref{Kind::Global, kGlobalRebuildParameter};
    }
    if (module == "torch") {
      for (int64_t i = 0; i < kNumStorageTypes; ++i) {
        if (name == kStorageTypes[i].name) return Ref{Kind::Global, kGlobalStorage0 + i};
      }
      if (name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0) {
        bad("storage type " + quote_name(module + "." + name) + " is not supported");
      }
    }
    bad("global " + quote_name(module + "." + name) +
        " is not allowed (a weights-only checkpoint may only name collections.OrderedDict, "
        "torch._utils._rebuild_tensor_v2/_rebuild_parameter and torch storage types)");
  }

  const Seq& tuple_args(const Ref& args, const std::string& callee) const {
    if (args.kind != Kind::Tuple) {
      bad("arguments of " + callee + " are " + kind_text(args) + ", not a tuple");
    }
    return seqs_[args.v];
  }

  bool empty_dict(const Ref& r) const { return r.kind == Kind::Dict && dicts_[r.v].items.empty(); }

  // REDUCE: the only calls a state dict needs. The callable must be an allowlisted global,
  // never a value computed by the pickle (e.g. the result of another REDUCE).
  Ref reduce(const Ref& callable, const Ref& args) {
    if (callable.kind != Kind::Global) {
      bad("the callable is " + kind_text(callable) + ", not an allowed global");
    }
    const std::string callee = "'" + global_text(callable.v) + "'";
    switch (callable.v) {
      case kGlobalOrderedDict: {
        const Seq& a = tuple_args(args, callee);
        if (!a.items.empty()) bad(callee + " must be called without arguments");
        return new_dict(true);
      }
      case kGlobalRebuildTensor: return rebuild_tensor(tuple_args(args, callee).items, callee);
      case kGlobalRebuildParameter: {
        const std::vector<Ref> a = tuple_args(args, callee).items;
        if (a.size() != 3) bad(callee + " takes 3 arguments, got " + std::to_string(a.size()));
        if (a[0].kind != Kind::Tensor) {
          bad(callee + " argument 1 is " + kind_text(a[0]) + ", not a tensor");
        }
        if (a[1].kind != Kind::Bool) {
          bad(callee + " argument 2 (requires_grad) is " + kind_text(a[1]));
        }
        if (!empty_dict(a[2])) {
          bad(callee + " backward_hooks must be an empty dict, got " + hooks_text(a[2]));
        }
        return a[0];
      }
      default:
        bad("calling " + callee + " is not allowed (storage types only appear in persistent ids)");
    }
  }

  std::string hooks_text(const Ref& r) const {
    if (r.kind == Kind::Dict) {
      return kind_text(r) + " of " + std::to_string(dicts_[r.v].items.size()) + " entries";
    }
    return kind_text(r);
  }

  bool int_tuple(const Ref& r, std::vector<int64_t>& out) const {
    if (r.kind != Kind::Tuple) return false;
    const Seq& s = seqs_[r.v];
    out.clear();
    if (s.items.size() > kMaxRank) {
      bad("a size or stride has " + std::to_string(s.items.size()) +
          " dimensions, over the limit of " + std::to_string(kMaxRank));
    }
    for (const Ref& x : s.items) {
      if (x.kind != Kind::Int) return false;
      out.push_back(x.v);
    }
    return true;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks,
  // [metadata]). Types are checked here; extents once the tensor's name is known.
  Ref rebuild_tensor(std::vector<Ref> a, const std::string& callee) {
    if (a.size() != 6 && a.size() != 7) {
      bad(callee + " takes 6 or 7 arguments, got " + std::to_string(a.size()));
    }
    if (a[0].kind != Kind::Storage) {
      bad(callee + " argument 1 is " + kind_text(a[0]) + ", not a storage");
    }
    if (a[1].kind != Kind::Int) {
      bad(callee + " storage_offset is " + kind_text(a[1]) + ", not an int");
    }
    if (a[1].v < 0) bad(callee + " storage_offset " + std::to_string(a[1].v) + " is negative");
    TensorObj t;
    t.storage = static_cast<size_t>(a[0].v);
    t.offset = static_cast<uint64_t>(a[1].v);
    if (!int_tuple(a[2], t.shape)) {
      bad(callee + " size is " + kind_text(a[2]) + ", not a tuple of ints");
    }
    if (!int_tuple(a[3], t.stride)) {
      bad(callee + " stride is " + kind_text(a[3]) + ", not a tuple of ints");
    }
    if (t.shape.size() > kMaxRank) {
      bad(callee + " size has " + std::to_string(t.shape.size()) +
          " dimensions, over the limit of " + std::to_string(kMaxRank));
    }
    if (t.shape.size() != t.stride.size()) {
      bad(callee + " size " + dims_text(t.shape) + " and stride " + dims_text(t.stride) +
          " differ in length");
    }
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] < 0) bad(callee + " size " + dims_text(t.shape) + " has a negative dimension");
      if (t.stride[i] < 0) bad(callee + " stride " + dims_text(t.stride) + " has a negative entry");
    }
    if (a[4].kind != Kind::Bool) {
      bad(callee + " requires_grad is " + kind_text(a[4]) + ", not a bool");
    }
    if (!empty_dict(a[5])) {
      bad(callee + " backward_hooks must be an empty dict, got " + hooks_text(a[5]));
    }
    // Metadata carries conj/neg bits that would change the values; none is expected.
    if (a.size() == 7 && a[6].kind != Kind::None && !empty_dict(a[6])) {
      bad(callee + " tensor metadata (" + kind_text(a[6]) + ") is not supported");
    }
    if (tensors_.size() >= kMaxTensors) {
      bad("more than " + std::to_string(kMaxTensors) + " tensors");
    }
    charge(64 + 16 * t.shape.size());
    tensors_.push_back(std::move(t));
    return Ref{Kind::Tensor, static_cast<int64_t>(tensors_.size() - 1)};
  }

  // BUILD sets attributes. Only an OrderedDict may receive them, and only the ones a state
  // dict carries: none, or `_metadata` (module versions), which is ignored.
  void build(const Ref& target, const Ref& state) {
    if (target.kind != Kind::Dict || !dicts_[target.v].ordered) {
      bad("BUILD on " + kind_text(target) + " is not allowed");
    }
    if (state.kind == Kind::None) return;
    if (state.kind != Kind::Dict) {
      bad("state of the OrderedDict is " + kind_text(state) + ", not a dict");
    }
    for (const auto& [k, v] : dicts_[state.v].items) {
      if (k.kind != Kind::Str || strs_[k.v] != "_metadata") {
        bad("OrderedDict attribute " +
            (k.kind == Kind::Str ? quote_name(strs_[k.v]) : kind_text(k)) +
            " is not allowed (only _metadata)");
      }
    }
  }

  // BINPERSID: ('storage', <storage type>, key, location, numel).
  Ref persistent_load(const Ref& pid) {
    if (pid.kind != Kind::Tuple) bad("persistent id is " + kind_text(pid) + ", not a tuple");
    const std::vector<Ref>& a = seqs_[pid.v].items;
    if (a.size() != 5) bad("persistent id has " + std::to_string(a.size()) + " fields, expected 5");
    if (a[0].kind != Kind::Str || strs_[a[0].v] != "storage") {
      bad("persistent id does not start with 'storage'");
    }
    if (a[1].kind != Kind::Global || a[1].v < kGlobalStorage0) {
      bad("persistent id storage type is " + kind_text(a[1]) + ", not a torch storage type");
    }
    if (a[2].kind != Kind::Str) bad("persistent id key is " + kind_text(a[2]) + ", not a string");
    if (a[3].kind != Kind::Str) {
      bad("persistent id location is " + kind_text(a[3]) + ", not a string");
    }
    if (a[4].kind != Kind::Int || a[4].v < 0) bad("persistent id numel is not a non-negative int");
    const std::string& key = strs_[a[2].v];
    // Keys name archive entries: keep them to plain file names.
    if (key.empty() || key == "." || key == ".." || key.size() > 256 ||
        key.find_first_of(std::string("/\\\0", 3)) != std::string::npos) {
      bad("storage key " + quote_name(key) + " is not a plain name");
    }
    const int32_t dtype = kStorageTypes[a[1].v - kGlobalStorage0].dtype;
    const uint64_t numel = static_cast<uint64_t>(a[4].v);
    if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dtype_size(dtype)) {
      bad("storage " + quote_name(key) + " of " + std::to_string(numel) + " elements is too large");
    }
    auto [it, inserted] = storage_ids_.emplace(key, storages_.size());
    if (inserted) {
      if (storages_.size() >= kMaxTensors) {
        bad("more than " + std::to_string(kMaxTensors) + " storages");
      }
      charge(96 + key.size());
      storages_.push_back(TorchStorage{key, dtype, numel});
    } else {
      const TorchStorage& s = storages_[it->second];
      if (s.dtype != dtype || s.numel != numel) {
        bad("storage " + quote_name(key) + " is declared as " + global_text(a[1].v) + " of " +
            std::to_string(numel) + " elements, but earlier as " + dtype_name(s.dtype) + " of " +
            std::to_string(s.numel));
      }
    }
    return Ref{Kind::Storage, static_cast<int64_t>(it->second)};
  }

  // --- the result

  TorchPickle finish(Ref result) {
    if (result.kind != Kind::Dict) {
      bad_result("the pickle holds " + kind_text(result) + ", not a dict of tensors");
    }
    // {"state_dict": {...}, ...} as written by some training scripts.
    for (const auto& [k, v] : dicts_[result.v].items) {
      if (k.kind == Kind::Str && strs_[k.v] == "state_dict" && v.kind == Kind::Dict) {
        result = v;
        break;
      }
    }
    const DictObj& dict = dicts_[result.v];
    if (dict.items.size() > kMaxTensors) {
      bad_result("more than " + std::to_string(kMaxTensors) + " tensors");
    }
    // Names are checked for duplicates before anything is copied: one long name shared through
    // the memo by many entries must fail here, not multiply into the result.
    std::vector<std::pair<std::string_view, size_t>> named;  // name, tensor index
    named.reserve(dict.items.size());
    for (size_t i = 0; i < dict.items.size(); ++i) {
      const auto& [k, v] = dict.items[i];
      if (k.kind != Kind::Str) {
        bad_result("key " + std::to_string(i) + " of the state dict is " + kind_text(k) +
                   ", not a string");
      }
      const std::string& name = strs_[k.v];
      if (v.kind != Kind::Tensor) {
        bad_result("value of " + quote_name(name) + " is " + kind_text(v) + ", not a tensor");
      }
      named.emplace_back(name, static_cast<size_t>(v.v));
    }
    std::sort(named.begin(), named.end());
    for (size_t i = 1; i < named.size(); ++i) {
      if (named[i].first == named[i - 1].first) {
        bad_result("tensor " + quote_name(named[i].first) + " appears twice");
      }
    }
    TorchPickle out;
    out.tensors.reserve(named.size());
    for (const auto& [name, index] : named) {
      const TensorObj& t = tensors_[index];
      // Distinct names are distinct strings, already paid for; one tensor's dims are copied
      // once per name, though.
      used_ += 64 + name.size() + 16 * t.shape.size();
      if (used_ > kMaxWorkingBytes) bad_result("the state dict needs more than 512 MiB of memory");
      out.tensors.push_back(TorchTensor{std::string(name), t.storage, t.offset, t.shape, t.stride});
    }
    out.storages = std::move(storages_);
    return out;
  }

  static constexpr Kind kUnset = static_cast<Kind>(255);

  const uint8_t* data_;
  size_t n_;
  const std::string& display_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  uint64_t used_ = 0;

  std::vector<Ref> stack_;
  std::vector<size_t> marks_;  // stack sizes at each open MARK
  std::vector<Ref> memo_;
  uint64_t memo_count_ = 0;  // entries set, the index MEMOIZE uses

  std::vector<std::string> strs_;
  std::vector<Seq> seqs_;
  std::vector<DictObj> dicts_;
  std::vector<TensorObj> tensors_;
  std::vector<TorchStorage> storages_;
  std::unordered_map<std::string, size_t> storage_ids_;
};

}  // namespace

TorchPickle parse_torch_pickle(const uint8_t* data, size_t n, const std::string& display) {
  return Unpickler(data, n, display).run();
}

}  // namespace mobius
