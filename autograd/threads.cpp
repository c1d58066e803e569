// Thread count shared by OpenMP loops and oneDNN (Debian's oneDNN uses the OpenMP runtime).
#include <omp.h>

#include "lat/ops.h"

namespace lat {

void set_num_threads(int n) { omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace lat
