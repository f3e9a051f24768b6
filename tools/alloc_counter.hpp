// Heap allocations (operator new) made by this process so far.
#pragma once
#include <cstdint>

namespace ablate::cli {
uint64_t allocation_count();
}
