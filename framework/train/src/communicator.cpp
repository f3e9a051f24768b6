// The single-process communicator and the choice of world() (communicator.hpp). The MPI
// one is framework/train/mpi/communicator_mpi.cpp, compiled only when CMake found MPI.
#include "ablate/communicator.hpp"

#include <cstdlib>
#include <memory>

#include "ablate/error.hpp"

namespace ablate {

#if ABLATE_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_world();  // communicator_mpi.cpp
#endif

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}

Communicator& world() {
  static std::unique_ptr<Communicator> w = [] {
    if (launched_by_mpi()) {
#if ABLATE_HAVE_MPI
      return make_mpi_world();
#else
      const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
      if (size && std::string(size) != "1")
        throw Error(
            "started by mpirun with " + std::string(size) +
            " processes, but this ablate was built without MPI: each would train the whole run "
            "alone. Install "
            "libopenmpi-dev (Debian) and rebuild (cmake -DABLATE_MPI=ON), or run without mpirun");
#endif
    }
    return std::make_unique<Communicator>();
  }();
  return *w;
}

}  // namespace ablate
