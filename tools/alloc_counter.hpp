// Heap allocations (operator new, and malloc and its kin where they can be counted)
// made by this process so far.
#pragma once
#include <cstdint>

namespace ablate::cli {
uint64_t allocation_count();
}
