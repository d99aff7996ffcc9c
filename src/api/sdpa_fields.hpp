// The checks of the attn_sdpa_desc fields appended in 0.3 (packed sequences and quantized K/V
// caches), kept apart from the 0.2 checks in sdpa.cpp.
#pragma once

#include "api/validate.hpp"

namespace attn::api {

// The ATTN_INVALID_ARGUMENT rules of quantized caches that need no memory read: kv_type, the
// scale and zero-point pointers, the scale strides, the groups, and the evenness that 4-bit
// caches need. `d` is known non-null.
void check_quantized_fields(checker &chk, const attn_sdpa_desc &d);

// The part of 0.3 the attention calls do not compute yet, ATTN_UNSUPPORTED naming the field:
// a quantized kv_type (packed sequences, q_start and kv_start, are computed). Called after every ATTN_INVALID_ARGUMENT rule of
// the desc, so a malformed desc is reported as such first. `backward` words the message of a
// quantized kv_type for the backward, which will not take one.
void reject_unbuilt_fields(checker &chk, const attn_sdpa_desc &d, bool backward);

}  // namespace attn::api
