// bin_util.hpp - byte-level builders of pickles and zip archives, for pytorch_model.bin tests.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace mobius::test {

inline uint32_t crc32_of(const std::string& s) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) c = table[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

inline void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

inline void set_le(std::string& out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}

// Emits pickle opcodes one by one, the way CPython's pickler writes them.
class Pickler {
 public:
  std::string bytes;

  Pickler& op(uint8_t code) {
    bytes += static_cast<char>(code);
    return *this;
  }
  Pickler& raw(const std::string& s) {
    bytes += s;
    return *this;
  }
  Pickler& proto(int v) { return op(0x80).op(static_cast<uint8_t>(v)); }
  Pickler& frame(uint64_t n) {
    op(0x95);
    put_le(bytes, n, 8);
    return *this;
  }
  Pickler& global(const std::string& module, const std::string& name) {
    return op('c').raw(module + "\n" + name + "\n");
  }
  Pickler& stack_global() { return op(0x93); }
  Pickler& mark() { return op('('); }
  Pickler& empty_dict() { return op('}'); }
  Pickler& empty_tuple() { return op(')'); }
  Pickler& empty_list() { return op(']'); }
  Pickler& none() { return op('N'); }
  Pickler& boolean(bool b) { return op(b ? 0x88 : 0x89); }
  Pickler& binput(uint32_t i) {
    if (i < 256) return op('q').op(static_cast<uint8_t>(i));
    op('r');
    put_le(bytes, i, 4);
    return *this;
  }
  Pickler& binget(uint32_t i) {
    if (i < 256) return op('h').op(static_cast<uint8_t>(i));
    op('j');
    put_le(bytes, i, 4);
    return *this;
  }
  Pickler& memoize() { return op(0x94); }
  Pickler& str(const std::string& s) {  // BINUNICODE
    op('X');
    put_le(bytes, s.size(), 4);
    return raw(s);
  }
  Pickler& short_str(const std::string& s) {  // SHORT_BINUNICODE
    op(0x8c).op(static_cast<uint8_t>(s.size()));
    return raw(s);
  }
  Pickler& integer(int64_t v) {
    if (v >= 0 && v < 256) return op('K').op(static_cast<uint8_t>(v));
    if (v >= 0 && v < 65536) {
      op('M');
      put_le(bytes, static_cast<uint64_t>(v), 2);
      return *this;
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      put_le(bytes, static_cast<uint64_t>(v), 4);
      return *this;
    }
    op(0x8a).op(8);
    put_le(bytes, static_cast<uint64_t>(v), 8);
    return *this;
  }
  Pickler& binfloat(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    op('G');
    for (int i = 7; i >= 0; --i) bytes += static_cast<char>((u >> (8 * i)) & 0xFF);
    return *this;
  }
  Pickler& tuple() { return op('t'); }
  Pickler& tuple_n(int n) { return op(static_cast<uint8_t>(0x84 + n)); }
  Pickler& reduce() { return op('R'); }
  Pickler& build() { return op('b'); }
  Pickler& setitem() { return op('s'); }
  Pickler& setitems() { return op('u'); }
  Pickler& append() { return op('a'); }
  Pickler& appends() { return op('e'); }
  Pickler& binpersid() { return op('Q'); }
  Pickler& stop() { return op('.'); }

  // An int tuple such as a tensor's size or stride.
  Pickler& int_tuple(const std::vector<int64_t>& v) {
    if (v.empty()) return empty_tuple();
    if (v.size() <= 3) {
      for (int64_t x : v) integer(x);
      return tuple_n(static_cast<int>(v.size()));
    }
    mark();
    for (int64_t x : v) integer(x);
    return tuple();
  }
  // The persistent id torch.save writes for a storage.
  Pickler& storage(const std::string& type, const std::string& key, int64_t numel,
                   const std::string& location = "cpu") {
    mark().str("storage").global("torch", type).str(key).str(location).integer(numel).tuple();
    return binpersid();
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()) as torch.save
  // writes it, minus the memo.
  Pickler& tensor(const std::string& type, const std::string& key, int64_t numel, int64_t offset,
                  const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2");
    mark();
    storage(type, key, numel);
    integer(offset).int_tuple(size).int_tuple(stride).boolean(false);
    global("collections", "OrderedDict").empty_tuple().reduce();
    return tuple().reduce();
  }
};

struct PklTensor {
  std::string name;
  std::string type;  // FloatStorage, HalfStorage, ...
  std::string key;
  int64_t numel;
  int64_t offset;
  std::vector<int64_t> size;
  std::vector<int64_t> stride;
};

// A protocol-2 OrderedDict state dict, the shape transformers' save_pretrained produces.
inline std::string state_dict_pickle(const std::vector<PklTensor>& tensors) {
  Pickler p;
  p.proto(2).global("collections", "OrderedDict").binput(0).empty_tuple().reduce().binput(1);
  p.mark();
  for (const auto& t : tensors) {
    p.str(t.name).tensor(t.type, t.key, t.numel, t.offset, t.size, t.stride);
  }
  return p.setitems().stop().bytes;
}

struct ZipItem {
  std::string name;
  std::string data;
  uint16_t method = 0;
  uint16_t flags = 0x0808;   // what torch's writer sets: data descriptor + UTF-8 names
  bool local_sizes = false;  // write sizes into the local header instead (flag bit 3 cleared)
  bool zip64_extra = false;  // give the directory entry a Zip64 extra with the real values
};

// Positions inside a built archive, for tests that corrupt specific fields.
struct ZipLayout {
  std::vector<size_t> local;    // local header offsets, in item order
  std::vector<size_t> central;  // central directory entry offsets, in item order
  size_t cd_offset = 0;
  size_t end_offset = 0;    // the end of central directory record
  size_t end64_offset = 0;  // the Zip64 end record (when written)
};

// Builds a zip archive like torch's PyTorchStreamWriter: local headers padded so data starts at
// a 64-byte boundary, data descriptors, and (optionally) Zip64 end records.
inline std::string build_zip(const std::vector<ZipItem>& items, bool zip64 = true,
                             ZipLayout* layout = nullptr) {
  std::string out;
  ZipLayout lay;
  std::vector<uint64_t> offsets;
  for (const auto& it : items) {
    const size_t at = out.size();
    lay.local.push_back(at);
    offsets.push_back(at);
    const uint16_t flags = it.local_sizes ? static_cast<uint16_t>(it.flags & ~8) : it.flags;
    const uint32_t crc = crc32_of(it.data);
    put_le(out, 0x04034b50, 4);
    put_le(out, 20, 2);
    put_le(out, flags, 2);
    put_le(out, it.method, 2);
    put_le(out, 0, 4);  // time, date
    put_le(out, it.local_sizes ? crc : 0, 4);
    put_le(out, it.local_sizes ? it.data.size() : 0, 4);
    put_le(out, it.local_sizes ? it.data.size() : 0, 4);
    put_le(out, it.name.size(), 2);
    const size_t base = out.size() + 2 + it.name.size() + 4;
    const size_t pad = (64 - base % 64) % 64;
    put_le(out, 4 + pad, 2);
    out += it.name;
    put_le(out, 0x4246, 2);  // "FB", torch's padding field
    put_le(out, pad, 2);
    out += std::string(pad, 'Z');
    out += it.data;
    if (!it.local_sizes) {
      put_le(out, 0x08074b50, 4);
      put_le(out, crc, 4);
      put_le(out, it.data.size(), 4);
      put_le(out, it.data.size(), 4);
    }
  }
  lay.cd_offset = out.size();
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    lay.central.push_back(out.size());
    const uint16_t flags = it.local_sizes ? static_cast<uint16_t>(it.flags & ~8) : it.flags;
    put_le(out, 0x02014b50, 4);
    put_le(out, 0x031e, 2);
    put_le(out, 45, 2);
    put_le(out, flags, 2);
    put_le(out, it.method, 2);
    put_le(out, 0, 4);
    put_le(out, crc32_of(it.data), 4);
    const uint64_t sat = 0xFFFFFFFF;
    put_le(out, it.zip64_extra ? sat : it.data.size(), 4);
    put_le(out, it.zip64_extra ? sat : it.data.size(), 4);
    put_le(out, it.name.size(), 2);
    put_le(out, it.zip64_extra ? 28 : 0, 2);
    put_le(out, 0, 2);  // comment
    put_le(out, 0, 2);  // disk
    put_le(out, 0, 2);
    put_le(out, 0, 4);
    put_le(out, it.zip64_extra ? sat : offsets[i], 4);
    out += it.name;
    if (it.zip64_extra) {
      put_le(out, 1, 2);
      put_le(out, 24, 2);
      put_le(out, it.data.size(), 8);
      put_le(out, it.data.size(), 8);
      put_le(out, offsets[i], 8);
    }
  }
  const size_t cd_size = out.size() - lay.cd_offset;
  if (zip64) {
    lay.end64_offset = out.size();
    put_le(out, 0x06064b50, 4);
    put_le(out, 44, 8);
    put_le(out, 0x031e, 2);
    put_le(out, 45, 2);
    put_le(out, 0, 4);
    put_le(out, 0, 4);
    put_le(out, items.size(), 8);
    put_le(out, items.size(), 8);
    put_le(out, cd_size, 8);
    put_le(out, lay.cd_offset, 8);
    put_le(out, 0x07064b50, 4);
    put_le(out, 0, 4);
    put_le(out, lay.end64_offset, 8);
    put_le(out, 1, 4);
  }
  lay.end_offset = out.size();
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 2);
  put_le(out, 0, 2);
  put_le(out, items.size(), 2);
  put_le(out, items.size(), 2);
  put_le(out, cd_size, 4);
  put_le(out, lay.cd_offset, 4);
  put_le(out, 0, 2);
  if (layout) *layout = lay;
  return out;
}

// A torch.save archive: <top>/data.pkl, <top>/data/<key> per storage, <top>/version.
inline std::string torch_zip(const std::string& pickle,
                             const std::map<std::string, std::string>& storages,
                             const std::string& top = "archive", ZipLayout* layout = nullptr) {
  std::vector<ZipItem> items;
  items.push_back({top + "/data.pkl", pickle});
  for (const auto& [key, bytes] : storages) items.push_back({top + "/data/" + key, bytes});
  items.push_back({top + "/version", "3\n"});
  return build_zip(items, true, layout);
}

template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  std::string s(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(s.data(), values.data(), s.size());
  return s;
}

}  // namespace mobius::test
