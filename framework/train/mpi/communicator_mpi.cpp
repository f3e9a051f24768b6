// MPI_COMM_WORLD as the run's communicator (communicator.hpp). Compiled only when CMake
// finds MPI (option ABLATE_MPI). Non-blocking allreduces for the gradient buckets; the
// ranks of one machine are counted with a shared-memory split to share its cores.
// The C API only: no MPI C++ bindings (deprecated, and a library of their own).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ablate/communicator.hpp"
#include "ablate/error.hpp"

namespace ablate {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string(what) + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

// Collectives move at most INT_MAX elements per call.
constexpr size_t kMaxCount = size_t{1} << 30;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    library_ = std::string(version, static_cast<size_t>(len));
    library_ = library_.substr(0, library_.find(','));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string description() const override {
    return std::to_string(size_) + " MPI ranks (" + library_ + ")";
  }

  void allreduce_sum(double* data, size_t n) override {
    for (size_t i = 0; i < n; i += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, data + i, static_cast<int>(std::min(kMaxCount, n - i)),
                          MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  }
  void start_sum(float* data, size_t n) override {
    for (size_t i = 0; i < n; i += kMaxCount) {
      reqs_.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, data + i, static_cast<int>(std::min(kMaxCount, n - i)),
                           MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &reqs_.back()),
            "MPI_Iallreduce");
    }
  }
  void poll() override {
    if (reqs_.empty()) return;
    int done = 0;
    check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE),
          "MPI_Testall");
  }
  void wait_all() override {
    check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    reqs_.clear();
  }
  void broadcast(float* data, size_t n, int root) override {
    for (size_t i = 0; i < n; i += kMaxCount)
      check(MPI_Bcast(data + i, static_cast<int>(std::min(kMaxCount, n - i)), MPI_FLOAT, root,
                      MPI_COMM_WORLD),
            "MPI_Bcast");
  }
  void broadcast(uint64_t* data, size_t n, int root) override {
    for (size_t i = 0; i < n; i += kMaxCount)
      check(MPI_Bcast(data + i, static_cast<int>(std::min(kMaxCount, n - i)), MPI_UINT64_T, root,
                      MPI_COMM_WORLD),
            "MPI_Bcast");
  }
  void abort(int exit_code) override {
    if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  std::string library_;
  std::vector<MPI_Request> reqs_;  // started by start_sum, not yet waited for
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_world() { return std::make_unique<MpiCommunicator>(); }

}  // namespace ablate
