// checksum.cpp -- FNV-1a 64 + length + finaliser (see checksum.h).
#include "cache_db/checksum.h"

namespace fa::cache {

uint64_t blob_checksum(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ULL;
  }
  h ^= static_cast<uint64_t>(size);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace fa::cache
