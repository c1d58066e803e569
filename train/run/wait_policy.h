// OpenMP's wait policy, chosen at start from the machine's load. A training step meets at
// an OpenMP barrier a few hundred times. By default libgomp's threads spin there for a while
// before they sleep, which is fastest on idle cores; when other processes keep a core busy,
// a spinning thread takes the core from the very thread it waits for, and a 2-thread run on
// 2 cores fell to 28% of its speed (one `yes > /dev/null` beside it). OMP_WAIT_POLICY=passive
// (threads sleep at once) kept more than half of it there, but costs about a third of the
// speed on idle cores. libgomp reads the policy once, when it is loaded: so the choice samples
// /proc/stat before any OpenMP work and, to switch to passive, runs the program again
// (execv of /proc/self/exe, same arguments) with OMP_WAIT_POLICY=passive in its environment.
// The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins. Linux only: elsewhere
// (no /proc/stat) the default stays.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace lat {

/// The variable that marks a process restarted by choose_wait_policy: it holds the reason
/// (e.g. "other processes kept 1.0 of 2 cores busy at start"), so the restarted process can
/// say why and never restarts again.
constexpr const char* kWaitPolicyMarker = "LAT_WAIT_POLICY_CHOSEN";

/// Cores that other processes keep busy, at or above which passive is chosen.
constexpr double kBusyCoresForPassive = 0.5;

/// The aggregate "cpu" line of /proc/stat: jiffies spent busy (user, system, irq, softirq),
/// in all (busy plus nice, idle and iowait; steal and guest left out), and the number of
/// "cpuN" lines. Niced processes do not count as busy: the scheduler gives them a small
/// share beside a thread of normal priority, so they rarely delay a barrier.
struct CpuTimes {
  uint64_t busy = 0, total = 0;
  int cpus = 0;
};

/// Parses the text of /proc/stat. Throws lat::Error naming `source` when the "cpu" line is
/// missing or has fewer than 7 numbers, or when there is no "cpuN" line.
CpuTimes parse_proc_stat(const std::string& text, const std::string& source);

/// What other processes kept busy between two samples `wall_s` seconds apart.
struct MachineLoad {
  double busy_cores = 0.0;  ///< others' average busy cores, >= 0
  int cpus = 0;
};

/// The machine's busy cores between `before` and `after` less this process's own CPU time
/// over the interval (`own_cpu_s`). No jiffy elapsed: busy_cores 0.
MachineLoad load_between(const CpuTimes& before, const CpuTimes& after, double own_cpu_s, double wall_s);

/// The environment variables the choice reads (unset: nullopt).
struct WaitPolicyEnv {
  std::optional<std::string> omp_wait_policy;  ///< OMP_WAIT_POLICY
  std::optional<std::string> gomp_spincount;   ///< GOMP_SPINCOUNT
  std::optional<std::string> marker;           ///< kWaitPolicyMarker
  bool mpi_launcher = false;                   ///< launched_by_mpi()
};

enum class WaitPolicyAction { keep, restart_passive };

/// What to do, and the one line that says which policy runs and why.
struct WaitPolicyDecision {
  WaitPolicyAction action = WaitPolicyAction::keep;
  std::string note;  ///< for the log; with restart_passive, the reason the restarted process reports
};

/// The choice: keep passive in a restarted process (the marker, with OMP_WAIT_POLICY=passive),
/// keep whatever the user set (OMP_WAIT_POLICY, GOMP_SPINCOUNT), keep the default under an MPI launcher (each rank gets
/// its share of the cores), else call `sample` (which measures the load; nullopt when it
/// cannot) and restart with passive when others keep kBusyCoresForPassive cores or more busy.
/// `sample` is called only in that last case.
WaitPolicyDecision decide_wait_policy(const WaitPolicyEnv& env,
                                      const std::function<std::optional<MachineLoad>()>& sample);

/// The load over `wall_s` seconds from /proc/stat (this thread sleeps meanwhile); nullopt
/// when /proc/stat cannot be read or parsed.
std::optional<MachineLoad> sample_machine_load(double wall_s);

/// Chooses the wait policy for this process (decide_wait_policy with this process's
/// environment and sample_machine_load over 0.15 s) and returns its one-line note, which
/// chosen_wait_policy_note() keeps for the run's banner. Call it first thing in main, before
/// any OpenMP work, with main's argv: to switch to passive it does not return but runs
/// /proc/self/exe again with `argv`; when that exec fails it returns a note saying so, and
/// the default policy stays.
std::string choose_wait_policy(char** argv);

/// The note of this process's choose_wait_policy call; empty when there was none (lat used
/// as a library: the policy is then the program's business).
const std::string& chosen_wait_policy_note();

}  // namespace lat
