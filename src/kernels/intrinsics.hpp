// The x86 intrinsics, included first by every translation unit that instantiates kernels.
// GCC 12's AVX-512 intrinsics pass an uninitialised __m512 as the unused merge operand
// (GCC bug 105593), and -Wuninitialized reports it at every inlined use. The pragmas must
// come before the intrinsics headers are first included.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
