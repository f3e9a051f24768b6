// The conformance suite of each plugin family, one file each in this directory
// (conformance/<family>.cpp; ffn and norm share rowwise.cpp): a list of named checks, one
// property of a variant each, run in order by `ablate plugin check` and by the test suite.
// A family's descriptor (families/<family>.cpp) points FamilyDescriptor::checks at its suite.
#pragma once

#include "ablate/family.hpp"

namespace ablate::conformance {

void check_attention(Checker& ck, const Subject& s);
void check_block(Checker& ck, const Subject& s);
void check_evaluator(Checker& ck, const Subject& s);
void check_ffn(Checker& ck, const Subject& s);
void check_head(Checker& ck, const Subject& s);
void check_init(Checker& ck, const Subject& s);
void check_norm(Checker& ck, const Subject& s);
void check_objective(Checker& ck, const Subject& s);
void check_optimizer(Checker& ck, const Subject& s);
void check_positional(Checker& ck, const Subject& s);
void check_qk_transform(Checker& ck, const Subject& s);
void check_scheduler(Checker& ck, const Subject& s);
void check_task(Checker& ck, const Subject& s);
void check_tokenizer(Checker& ck, const Subject& s);

}  // namespace ablate::conformance
