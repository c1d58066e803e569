// Links inside an HDF5 file that lat reads (checkpoints, token files). lat follows only hard
// links: a soft link points elsewhere in the file under another name, an external link makes
// HDF5 open another file (which may be missing, a FIFO or a device), and a user-defined link
// runs code of a registered link class. Refused like external storage (hdf5_dataset.h). Only
// the links a reader is about to follow are checked, through the same lookups it makes: a
// whole-file walk would read (and on damaged files crash in) group indexes lat never uses.
#pragma once
#include <hdf5.h>

#include <string>

namespace lat {

/// Throws lat::Error "link '<path>' is a soft link to '<target>'; lat reads only hard links
/// (the data itself in this file)" (or "an external link to '<file>:<object>'", "a
/// user-defined link (class <id>)") when the existing link `name` of group `loc`, shown as
/// `path`, is not a hard link; an error too when its kind cannot be read.
void check_hard_link(hid_t loc, const char* name, const std::string& path);

/// check_hard_link for each component of `path` (relative to `loc`, e.g. "group/tokens"), from
/// the first, so that none is followed before it is checked; stops at the first component that
/// does not exist (the caller reports a missing link).
void check_hard_links_along(hid_t loc, const std::string& path);

}  // namespace lat
