// dtype.cpp - element sizes and display names of the MOBIUS_DTYPE_* (ONNX TensorProto) codes.
#include "checkpoint/checkpoint.hpp"
#include "mobius/plugin.h"

namespace mobius {

size_t dtype_size(int32_t dtype) {
  switch (dtype) {
    case MOBIUS_DTYPE_BOOL:
    case kDtypeFloat8E4M3FN:
    case MOBIUS_DTYPE_UINT8:
    case MOBIUS_DTYPE_INT8: return 1;
    case MOBIUS_DTYPE_UINT16:
    case MOBIUS_DTYPE_INT16:
    case MOBIUS_DTYPE_FLOAT16:
    case MOBIUS_DTYPE_BFLOAT16: return 2;
    case MOBIUS_DTYPE_FLOAT:
    case MOBIUS_DTYPE_INT32:
    case MOBIUS_DTYPE_UINT32: return 4;
    case MOBIUS_DTYPE_INT64:
    case MOBIUS_DTYPE_UINT64:
    case MOBIUS_DTYPE_DOUBLE: return 8;
    default: return 0;
  }
}

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case MOBIUS_DTYPE_UNDEFINED: return "undefined";
    case MOBIUS_DTYPE_FLOAT: return "float32";
    case MOBIUS_DTYPE_UINT8: return "uint8";
    case MOBIUS_DTYPE_INT8: return "int8";
    case MOBIUS_DTYPE_UINT16: return "uint16";
    case MOBIUS_DTYPE_INT16: return "int16";
    case MOBIUS_DTYPE_INT32: return "int32";
    case MOBIUS_DTYPE_INT64: return "int64";
    case MOBIUS_DTYPE_BOOL: return "bool";
    case MOBIUS_DTYPE_FLOAT16: return "float16";
    case MOBIUS_DTYPE_DOUBLE: return "float64";
    case MOBIUS_DTYPE_UINT32: return "uint32";
    case MOBIUS_DTYPE_UINT64: return "uint64";
    case MOBIUS_DTYPE_BFLOAT16: return "bfloat16";
    case kDtypeFloat8E4M3FN: return "float8_e4m3fn";
    default: return "unknown";
  }
}

}  // namespace mobius
