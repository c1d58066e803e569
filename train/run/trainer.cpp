// train(): one Run, and on several ranks the end of the whole job when any rank fails.
#include "train/run/trainer.h"

#include <exception>

#include "train/distributed/distributed.h"
#include "train/run/run.h"

namespace lat {

TrainSummary train(const Config& config, const TrainOptions& options) {
  Distributed& dist = Distributed::get();
  if (dist.world_size() == 1) {
    Run run(config, options);
    return run.run();
  }
  // A failure on one rank ends the job: its error names the rank, and MPI_Abort ends the other
  // ranks, which would otherwise wait forever in their next collective.
  try {
    Run run(config, options);
    return run.run();
  } catch (const ConfigError& e) {
    dist.abort(e.what(), 2);
  } catch (const std::exception& e) {
    dist.abort(e.what(), 1);
  }
}

}  // namespace lat
