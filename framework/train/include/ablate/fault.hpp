// Fault injection for the crash tests (tests/train/test_resume.cpp): with the environment
// variable ABLATE_FAULT="point:N[,point:N...]", the N-th arrival (1-based, counted per
// process) at fault_point("point") kills the process with SIGKILL, exactly as `kill -9`
// would, at a place a timed kill rarely hits (half-way through a checkpoint, mid-row in
// the HDF5 file). An entry "point:Nms" instead sleeps N milliseconds at every arrival: a run
// slow enough that a test's signal always lands mid-run, however fast the machine. Without
// the variable a fault point is one test of a cached flag.
// Points: step (start of each optimizer step), checkpoint.partial (half of the temporary
// file written), checkpoint.rename (temporary file complete, not yet renamed),
// runfile.append (first column of a row written, the others not).
#pragma once

namespace ablate {

void fault_point(const char* name);

}  // namespace ablate
