// Links inside an HDF5 file that lat reads (checkpoints, token files). lat reads only hard
// links: a soft link points elsewhere in the file under another name, an external link makes
// HDF5 open another file (which may be missing, a FIFO or a device), and a user-defined link
// runs code of a registered link class. Refused like external storage (hdf5_dataset.h).
#pragma once
#include <hdf5.h>

#include <string>

namespace lat {

/// Walks every link reachable from the root group of `file` (without following any) and
/// throws lat::Error "link '<path>' is a soft link to '<target>'; ..." (or an external link to
/// '<file>:<path>', or a user-defined link of class <id>) for the first that is not a hard link.
/// A link table that does not read is an error too. Call before anything else is opened.
void refuse_non_hard_links(hid_t file);

}  // namespace lat
