// The scalar conversion rules, for the reference and its tests: they live in core/convert.hpp,
// shared by every layer.
#pragma once

#include "core/convert.hpp"
