// Test and benchmark only: the smallest head group whose decoding steps attn_sdpa's SIMD path
// plans with the group's heads as tile rows (sdpa_plan.hpp; default heads_as_rows_min_group).
// 0 plans every decoding step as before heads became tile rows (the decode entry, a few heads
// a tile), a smaller group tries them where the default would not: to compare in one run.
#pragma once

#include <cstdint>

namespace attn::ops {

void set_heads_as_rows_from(int64_t min_group);
int64_t heads_as_rows_from();

}  // namespace attn::ops
