// The processes of one data-parallel run (docs/CLUSTER.md): rank, size, and the few
// collectives training needs. One process is the trivial communicator; with MPI (built
// when CMake finds it, ABLATE_MPI) and a launcher (mpirun, srun --mpi=pmix) it is
// MPI_COMM_WORLD. No MPI type appears here: plugins and the rest of the framework never
// see MPI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ablate {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  virtual int local_size() const { return 1; }  // ranks on this machine (to share its cores)
  virtual std::string description() const { return "1 process"; }

  // Elementwise sums over all ranks, in place; every rank gets the same bits.
  virtual void allreduce_sum(double* data, size_t n) {}
  // Non-blocking sums of float buffers (gradient buckets): start_sum starts one, poll lets
  // the started ones progress, wait_all completes them all. Every rank must start the
  // same buffers in the same order.
  virtual void start_sum(float* data, size_t n) {}
  virtual void poll() {}
  virtual void wait_all() {}
  // Replaces data on every rank with root's.
  virtual void broadcast(float* data, size_t n, int root = 0) {}
  virtual void broadcast(uint64_t* data, size_t n, int root = 0) {}
  // Ends every rank of the run (an error on one rank must not leave the others waiting in
  // a collective). With one process: nothing.
  virtual void abort(int exit_code) {}

  bool root() const { return rank() == 0; }
};

// The communicator of this process: MPI_COMM_WORLD when this build has MPI and the process
// was started by an MPI launcher (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK set), else the
// single-process one. MPI is initialised on the first call and finalised at exit.
Communicator& world();

// True when an MPI launcher started this process (whether or not the build has MPI).
bool launched_by_mpi();

}  // namespace ablate
