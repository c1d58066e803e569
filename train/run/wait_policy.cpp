// OpenMP's wait policy at start (wait_policy.h): /proc/stat sampling, the decision, the restart.
#include "train/run/wait_policy.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "lat/error.h"
#include "train/distributed/distributed.h"

namespace lat {
namespace {

constexpr const char* kPrefix = "OpenMP wait policy: ";

std::string one_decimal(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;  // empty is unset, as libgomp reads it
  return std::string(v);
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::string& note_storage() {
  static std::string note;
  return note;
}

std::optional<CpuTimes> read_proc_stat() {
  std::ifstream in("/proc/stat");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parse_proc_stat(text.str(), "/proc/stat");
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

CpuTimes parse_proc_stat(const std::string& text, const std::string& source) {
  CpuTimes times;
  bool aggregate = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cpu", 0) != 0) continue;
    if (line.size() > 3 && std::isdigit(static_cast<unsigned char>(line[3]))) {
      ++times.cpus;
      continue;
    }
    if (line.size() > 3 && line[3] != ' ') continue;
    // user nice system idle iowait irq softirq [steal guest guest_nice]
    std::istringstream fields(line.substr(3));
    std::vector<uint64_t> v;
    for (uint64_t x = 0; v.size() < 7 && fields >> x;) v.push_back(x);
    LAT_CHECK(v.size() == 7, source << ": the \"cpu\" line: expected at least 7 numbers, found " << v.size()
                                    << " in '" << line.substr(0, 80) << "'");
    times.busy = v[0] + v[2] + v[5] + v[6];
    times.total = times.busy + v[1] + v[3] + v[4];
    aggregate = true;
  }
  LAT_CHECK(aggregate, source << ": expected a \"cpu\" line, found none");
  LAT_CHECK(times.cpus > 0, source << ": expected \"cpuN\" lines, found none");
  return times;
}

MachineLoad load_between(const CpuTimes& before, const CpuTimes& after, double own_cpu_s, double wall_s) {
  MachineLoad load;
  load.cpus = after.cpus;
  if (after.total <= before.total || after.busy < before.busy || wall_s <= 0.0) return load;
  const double share = static_cast<double>(after.busy - before.busy) / static_cast<double>(after.total - before.total);
  load.busy_cores = std::max(0.0, share * after.cpus - own_cpu_s / wall_s);
  return load;
}

WaitPolicyDecision decide_wait_policy(const WaitPolicyEnv& env,
                                      const std::function<std::optional<MachineLoad>()>& sample) {
  if (env.marker && env.omp_wait_policy == "passive")
    return {WaitPolicyAction::keep, std::string(kPrefix) + "passive, as " + *env.marker};
  if (env.omp_wait_policy) {
    // libgomp takes active or passive in any case, and ignores anything else with a warning.
    std::string policy = *env.omp_wait_policy;
    std::transform(policy.begin(), policy.end(), policy.begin(), [](unsigned char c) { return std::tolower(c); });
    if (policy != "active" && policy != "passive")
      return {WaitPolicyAction::keep, std::string(kPrefix) + "OpenMP's default, as OMP_WAIT_POLICY='" +
                                          *env.omp_wait_policy + "' is neither active nor passive"};
    return {WaitPolicyAction::keep, kPrefix + *env.omp_wait_policy + " (OMP_WAIT_POLICY)"};
  }
  if (env.gomp_spincount)
    return {WaitPolicyAction::keep,
            std::string(kPrefix) + "libgomp's default with GOMP_SPINCOUNT=" + *env.gomp_spincount + " (set by the user)"};
  if (env.mpi_launcher)
    return {WaitPolicyAction::keep, std::string(kPrefix) +
                                        "libgomp's default (not chosen under an MPI launcher: each rank has its share "
                                        "of the cores; OMP_WAIT_POLICY=passive suits a shared machine)"};
  const std::optional<MachineLoad> load = sample();
  if (!load)
    return {WaitPolicyAction::keep,
            std::string(kPrefix) + "libgomp's default (the machine's load could not be read from /proc/stat)"};
  const std::string seen = "other processes kept " + one_decimal(load->busy_cores) + " of " +
                           std::to_string(load->cpus) + " cores busy at start";
  if (load->busy_cores >= kBusyCoresForPassive)
    return {WaitPolicyAction::restart_passive, seen + " (set OMP_WAIT_POLICY to choose)"};
  return {WaitPolicyAction::keep, std::string(kPrefix) + "libgomp's default (threads spin a while at barriers), as " +
                                      seen + " (OMP_WAIT_POLICY=passive suits a busy machine)"};
}

std::optional<MachineLoad> sample_machine_load(double wall_s) {
  const std::optional<CpuTimes> before = read_proc_stat();
  if (!before) return std::nullopt;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(wall_s));
  const std::optional<CpuTimes> after = read_proc_stat();
  if (!after) return std::nullopt;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return load_between(*before, *after, process_cpu_seconds() - cpu0, wall);
}

std::string choose_wait_policy(char** argv) {
  WaitPolicyEnv env;
  env.omp_wait_policy = env_value("OMP_WAIT_POLICY");
  env.gomp_spincount = env_value("GOMP_SPINCOUNT");
  env.marker = env_value(kWaitPolicyMarker);
  env.mpi_launcher = launched_by_mpi();
  // The marker is this process's alone: a program it starts chooses for itself (and then
  // keeps the inherited OMP_WAIT_POLICY=passive as the user's).
  unsetenv(kWaitPolicyMarker);
  const WaitPolicyDecision d = decide_wait_policy(env, [] { return sample_machine_load(0.15); });
  if (d.action == WaitPolicyAction::keep) return note_storage() = d.note;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  setenv(kWaitPolicyMarker, d.note.c_str(), 1);
  execv("/proc/self/exe", argv);
  const std::string why = std::strerror(errno);
  unsetenv("OMP_WAIT_POLICY");
  unsetenv(kWaitPolicyMarker);
  return note_storage() = std::string(kPrefix) + "libgomp's default, though " + d.note +
                          ": restarting with passive failed (execv /proc/self/exe: " + why + ")";
}

const std::string& chosen_wait_policy_note() { return note_storage(); }

}  // namespace lat
