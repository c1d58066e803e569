// Running gnuplot so that no path or name can become a command: every string a script holds
// is written by gnuplot_string, and gnuplot runs without a shell, its image going to its stdout,
// a file the caller names and lat opens.
#pragma once
#include <string>

namespace lat {

/// `text` as a gnuplot double-quoted string: bytes in [A-Za-z0-9 ._/-] as they are, every other
/// byte as a three-digit octal escape (\ooo), which gnuplot turns back into the same byte. No
/// newline, quote or backslash can end the string, and no backtick or @ can start a
/// substitution, since none of them appears in the script's text.
std::string gnuplot_string(const std::string& text);

/// The full path of an executable `name` on PATH, or "" when there is none.
std::string find_on_path(const std::string& name);

/// How a gnuplot run ended: `succeeded` when it exited with status 0; otherwise `error` is the
/// first line of its stderr that names an error (else its first line, else "no message").
struct GnuplotOutcome {
  bool succeeded = false;
  std::string error;
};

/// Runs `gnuplot_path --default-settings` (no shell; no init file read) with `script` on its
/// stdin and its stdout written into `image_path`, which this creates or truncates (a symlink
/// there is refused). Throws lat::Error naming `image_path` when it cannot be created or
/// written, or `gnuplot_path` when it cannot be started.
GnuplotOutcome run_gnuplot(const std::string& gnuplot_path, const std::string& script, const std::string& image_path);

}  // namespace lat
