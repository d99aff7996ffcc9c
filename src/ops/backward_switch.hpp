// Test and benchmark only: routes attn_sdpa_backward_f32 on the SIMD path to the composed
// backward (sdpa_backward_composed.cpp) instead of the fused one, to compare the two. Also set
// at start-up by the environment variable ATTN_BACKWARD_COMPOSED=1 (read once).
#pragma once

namespace attn::ops {

void set_backward_composed(bool composed);
bool backward_composed();

}  // namespace attn::ops
