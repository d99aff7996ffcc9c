// The dropout decision, for the reference and its tests: it lives in core/dropout.hpp, shared
// by every layer.
#pragma once

#include "core/dropout.hpp"
