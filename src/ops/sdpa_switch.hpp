// Test and benchmark only, to compare plans in one run:
// - the smallest head group whose decoding steps attn_sdpa's SIMD path plans with the group's
//   heads as tile rows (sdpa_plan.hpp; default heads_as_rows_min_group). 0 plans every
//   decoding step as before heads became tile rows (the decode entry, a few heads a tile), a
//   smaller group tries them where the default would not;
// - whether sequences of more query rows than one decode tile holds (up to
//   kernels::decode_few_queries) may take the decode entry (default true); false plans them on
//   the packing entries, as before they could.
#pragma once

#include <cstdint>

namespace attn::ops {

void set_heads_as_rows_from(int64_t min_group);
int64_t heads_as_rows_from();
void set_few_rows_on_decode(bool on);
bool few_rows_on_decode();

}  // namespace attn::ops
