// pickle_vocab.hpp - the vocabulary of the restricted unpickler (unpickler.cpp): the only globals
// a torch.save state dict may name, its storage types, and every opcode of pickle protocols 0-5
// by name, for messages.
#pragma once

#include <cstdint>
#include <string>

#include "mobius/plugin.h"

namespace mobius::pickle {

struct StorageType {
  const char* name;
  int32_t dtype;
};

inline constexpr StorageType kStorageTypes[] = {
    {"DoubleStorage", MOBIUS_DTYPE_DOUBLE}, {"FloatStorage", MOBIUS_DTYPE_FLOAT},
    {"HalfStorage", MOBIUS_DTYPE_FLOAT16},  {"BFloat16Storage", MOBIUS_DTYPE_BFLOAT16},
    {"LongStorage", MOBIUS_DTYPE_INT64},    {"IntStorage", MOBIUS_DTYPE_INT32},
    {"ShortStorage", MOBIUS_DTYPE_INT16},   {"CharStorage", MOBIUS_DTYPE_INT8},
    {"ByteStorage", MOBIUS_DTYPE_UINT8},    {"BoolStorage", MOBIUS_DTYPE_BOOL},
};
inline constexpr int64_t kNumStorageTypes = sizeof(kStorageTypes) / sizeof(kStorageTypes[0]);

// The only globals a pickle may name. Storage types follow kGlobalStorage0, in table order.
enum GlobalId : int64_t {
  kGlobalOrderedDict = 0,
  kGlobalRebuildTensor = 1,
  kGlobalRebuildParameter = 2,
  kGlobalStorage0 = 16,
};

// The global's dotted name, for messages.
std::string global_text(int64_t id);

// The opcode's name ("BINUNICODE"); nullptr for a byte that is no opcode of protocols 0-5.
const char* opcode_name(uint8_t op);

}  // namespace mobius::pickle
