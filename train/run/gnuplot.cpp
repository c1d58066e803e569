// gnuplot through posix_spawn: the script and gnuplot's stderr are anonymous temporary files
// (std::tmpfile), so a gnuplot that stops reading early can neither block nor kill lat with
// SIGPIPE, and nothing is left behind; the image goes to the file the caller names.
#include "train/run/gnuplot.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>

#include "lat/error.h"

extern char** environ;

namespace fs = std::filesystem;

namespace lat {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using TempFile = std::unique_ptr<std::FILE, FileCloser>;

// An anonymous file holding `text`, positioned at its start.
TempFile temp_file_holding(const std::string& text) {
  TempFile file(std::tmpfile());
  LAT_CHECK(file != nullptr, "plot: cannot create a temporary file: " << std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file.get()) == text.size() &&
                       std::fflush(file.get()) == 0 && std::fseek(file.get(), 0, SEEK_SET) == 0;
  LAT_CHECK(written, "plot: cannot write a temporary file: " << std::strerror(errno));
  return file;
}

std::string read_all(std::FILE* file) {
  std::string text;
  if (std::fseek(file, 0, SEEK_SET) != 0) return text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
  return text;
}

// The first line of gnuplot's stderr that names an error, else its first line.
std::string first_error_line(const std::string& log) {
  std::istringstream in(log);
  std::string first, line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t^") == std::string::npos) continue;  // gnuplot's column markers
    if (first.empty()) first = line;
    if (line.find("rror") != std::string::npos) return line;
  }
  return first.empty() ? "no message" : first;
}

// Owns a file descriptor.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  /// Closes now; false when close reports an error (a write that failed late).
  bool close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

// Owns posix_spawn's file actions.
class SpawnActions {
 public:
  SpawnActions() { posix_spawn_file_actions_init(&actions_); }
  ~SpawnActions() { posix_spawn_file_actions_destroy(&actions_); }
  SpawnActions(const SpawnActions&) = delete;
  SpawnActions& operator=(const SpawnActions&) = delete;
  void redirect(int from_fd, int to_fd) { posix_spawn_file_actions_adddup2(&actions_, from_fd, to_fd); }
  const posix_spawn_file_actions_t* get() const { return &actions_; }

 private:
  posix_spawn_file_actions_t actions_;
};

}  // namespace

std::string gnuplot_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    const bool plain = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') || (byte >= '0' && byte <= '9') ||
                       byte == ' ' || byte == '.' || byte == '_' || byte == '/' || byte == '-';
    if (plain) {
      out += c;
    } else {
      const char octal[] = {'\\', static_cast<char>('0' + (byte >> 6)), static_cast<char>('0' + ((byte >> 3) & 7)),
                            static_cast<char>('0' + (byte & 7))};
      out.append(octal, sizeof octal);
    }
  }
  return out + "\"";
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate, ec)) return candidate.string();
  }
  return "";
}

GnuplotOutcome run_gnuplot(const std::string& gnuplot_path, const std::string& script, const std::string& image_path) {
  TempFile script_file = temp_file_holding(script);
  TempFile log_file = temp_file_holding("");
  Descriptor image(::open(image_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666));
  LAT_CHECK(image.get() >= 0, "plot: cannot create '" << image_path << "': " << std::strerror(errno));

  SpawnActions actions;
  actions.redirect(fileno(script_file.get()), STDIN_FILENO);
  actions.redirect(image.get(), STDOUT_FILENO);
  actions.redirect(fileno(log_file.get()), STDERR_FILENO);
  std::string program = gnuplot_path, no_init_files = "--default-settings";
  char* argv[] = {program.data(), no_init_files.data(), nullptr};
  pid_t pid = -1;
  const int spawn_error = ::posix_spawn(&pid, gnuplot_path.c_str(), actions.get(), nullptr, argv, environ);
  LAT_CHECK(spawn_error == 0, "plot: cannot start " << gnuplot_path << ": " << std::strerror(spawn_error));
  int status = 0;
  pid_t waited = -1;
  do waited = ::waitpid(pid, &status, 0);
  while (waited < 0 && errno == EINTR);
  LAT_CHECK(waited == pid, "plot: cannot wait for " << gnuplot_path << ": " << std::strerror(errno));
  LAT_CHECK(image.close(), "plot: cannot write '" << image_path << "': " << std::strerror(errno));

  GnuplotOutcome outcome;
  outcome.succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!outcome.succeeded) outcome.error = first_error_line(read_all(log_file.get()));
  return outcome;
}

}  // namespace lat
