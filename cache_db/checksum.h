// checksum.h -- the 64-bit checksum stored beside every cubin blob.
//
// FNV-1a over the bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3), then the byte count is folded in
// and the result passed through a 64-bit finaliser (xor-shift / multiply) so that truncation and single-bit flips
// both change it. It detects accidental damage, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fa::cache {

uint64_t blob_checksum(const uint8_t* data, size_t size);

}  // namespace fa::cache
