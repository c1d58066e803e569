// The wait-policy choice at start (train/run/wait_policy.h) on given inputs: /proc/stat
// parsing, the load between two samples, the decision (a policy the user set is never
// overridden and the load is then not even sampled), and choose_wait_policy itself with
// OMP_WAIT_POLICY set, which must return rather than restart the process.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "lat/error.h"
#include "tests/expect_error.h"
#include "train/run/wait_policy.h"

namespace lat {
namespace {

using testing::expect_error;

// /proc/stat of a 2-CPU machine (Linux 6.1 layout: ten numbers per cpu line).
const char* kStat =
    "cpu  100 5 20 800 7 3 2 9 0 0\n"
    "cpu0 50 2 10 400 3 1 1 4 0 0\n"
    "cpu1 50 3 10 400 4 2 1 5 0 0\n"
    "intr 12345 0 0\n"
    "ctxt 999\n"
    "cpufreq 1\n";

TEST(WaitPolicy, ParsesTheAggregateCpuLine) {
  const CpuTimes t = parse_proc_stat(kStat, "/proc/stat");
  EXPECT_EQ(t.busy, 100u + 20 + 3 + 2);  // user system irq softirq
  EXPECT_EQ(t.total, t.busy + 5 + 800 + 7);  // + nice idle iowait; steal left out
  EXPECT_EQ(t.cpus, 2);
}

TEST(WaitPolicy, RejectsAMalformedStat) {
  expect_error<Error>([] { parse_proc_stat("intr 1\ncpu0 1 2 3 4 5 6 7\n", "/proc/stat"); },
                      {"/proc/stat", "\"cpu\" line", "found none"});
  expect_error<Error>([] { parse_proc_stat("cpu  1 2 3 4 5\ncpu0 1 2 3 4 5 6 7\n", "/proc/stat"); },
                      {"/proc/stat", "at least 7 numbers", "found 5"});
  expect_error<Error>([] { parse_proc_stat("cpu  1 2 3 4 5 6 7\n", "/proc/stat"); }, {"/proc/stat", "cpuN"});
}

TEST(WaitPolicy, LoadOfOthersBetweenTwoSamples) {
  const CpuTimes before{100, 400, 2};
  // 30 jiffies passed on 2 CPUs, 21 of them busy: 1.4 cores, of which this process used
  // 0.03 s of CPU in 0.15 s (0.2 of a core).
  const MachineLoad load = load_between(before, {121, 430, 2}, 0.03, 0.15);
  EXPECT_NEAR(load.busy_cores, 1.4 - 0.2, 1e-12);
  EXPECT_EQ(load.cpus, 2);
  EXPECT_EQ(load_between(before, {100, 430, 2}, 0.15, 0.15).busy_cores, 0.0) << "never below zero";
  EXPECT_EQ(load_between(before, before, 0.0, 0.15).busy_cores, 0.0) << "no jiffy elapsed";
}

// A sampler that counts its calls and reports `load`.
struct Sampler {
  std::optional<MachineLoad> load;
  int calls = 0;
  std::function<std::optional<MachineLoad>()> fn() {
    return [this] {
      ++calls;
      return load;
    };
  }
};

TEST(WaitPolicy, ThePolicyTheUserSetIsNeverOverridden) {
  for (const char* policy : {"active", "passive", "ACTIVE"}) {
    Sampler busy{MachineLoad{2.0, 2}};
    WaitPolicyEnv env;
    env.omp_wait_policy = policy;
    const WaitPolicyDecision d = decide_wait_policy(env, busy.fn());
    EXPECT_EQ(d.action, WaitPolicyAction::keep) << policy;
    EXPECT_EQ(d.note, std::string("OpenMP wait policy: ") + policy + " (OMP_WAIT_POLICY)");
    EXPECT_EQ(busy.calls, 0) << "nothing to measure";
  }
  Sampler busy{MachineLoad{2.0, 2}};
  WaitPolicyEnv env;
  env.gomp_spincount = "1000";
  const WaitPolicyDecision spin = decide_wait_policy(env, busy.fn());
  EXPECT_EQ(spin.action, WaitPolicyAction::keep);
  EXPECT_NE(spin.note.find("GOMP_SPINCOUNT=1000"), std::string::npos) << spin.note;
  EXPECT_EQ(busy.calls, 0);
}

TEST(WaitPolicy, AnInvalidPolicyIsNamedAsOpenMPsDefaultNotAsInEffect) {
  Sampler busy{MachineLoad{2.0, 2}};
  WaitPolicyEnv env;
  env.omp_wait_policy = "garbage";
  const WaitPolicyDecision d = decide_wait_policy(env, busy.fn());
  EXPECT_EQ(d.action, WaitPolicyAction::keep);
  EXPECT_EQ(d.note, "OpenMP wait policy: OpenMP's default, as OMP_WAIT_POLICY='garbage' is neither active nor passive");
  EXPECT_EQ(busy.calls, 0) << "the user's variable is still theirs";
}

TEST(WaitPolicy, ARestartedProcessKeepsPassiveAndSaysWhy) {
  Sampler busy{MachineLoad{2.0, 2}};
  WaitPolicyEnv restarted;
  restarted.omp_wait_policy = "passive";
  restarted.marker = "other processes kept 1.0 of 2 cores busy";
  const WaitPolicyDecision d = decide_wait_policy(restarted, busy.fn());
  EXPECT_EQ(d.action, WaitPolicyAction::keep);
  EXPECT_EQ(d.note, "OpenMP wait policy: passive, as other processes kept 1.0 of 2 cores busy");
  EXPECT_EQ(busy.calls, 0);
  // A marker without OMP_WAIT_POLICY=passive beside it was not set by a restart: ignored.
  WaitPolicyEnv stray_marker;
  stray_marker.marker = "x";
  const WaitPolicyDecision stray = decide_wait_policy(stray_marker, busy.fn());
  EXPECT_EQ(stray.action, WaitPolicyAction::restart_passive);
  EXPECT_EQ(busy.calls, 1);
}

TEST(WaitPolicy, NotChosenUnderAnMpiLauncher) {
  Sampler busy{MachineLoad{2.0, 2}};
  WaitPolicyEnv env;
  env.mpi_launcher = true;
  const WaitPolicyDecision d = decide_wait_policy(env, busy.fn());
  EXPECT_EQ(d.action, WaitPolicyAction::keep);
  EXPECT_NE(d.note.find("MPI"), std::string::npos) << d.note;
  EXPECT_EQ(busy.calls, 0);
}

TEST(WaitPolicy, PassiveFromHalfABusyCore) {
  Sampler idle{MachineLoad{0.4, 2}};
  const WaitPolicyDecision keep = decide_wait_policy({}, idle.fn());
  EXPECT_EQ(keep.action, WaitPolicyAction::keep);
  EXPECT_EQ(keep.note,
            "OpenMP wait policy: libgomp's default (threads spin a while at barriers), as other processes kept 0.4 of "
            "2 cores busy at start (OMP_WAIT_POLICY=passive suits a busy machine)");
  EXPECT_EQ(idle.calls, 1);
  Sampler busy{MachineLoad{kBusyCoresForPassive, 2}};
  const WaitPolicyDecision restart = decide_wait_policy({}, busy.fn());
  EXPECT_EQ(restart.action, WaitPolicyAction::restart_passive);
  EXPECT_EQ(restart.note, "other processes kept 0.5 of 2 cores busy at start (set OMP_WAIT_POLICY to choose)");
  Sampler unreadable{std::nullopt};
  const WaitPolicyDecision unknown = decide_wait_policy({}, unreadable.fn());
  EXPECT_EQ(unknown.action, WaitPolicyAction::keep);
  EXPECT_NE(unknown.note.find("/proc/stat"), std::string::npos) << unknown.note;
}

TEST(WaitPolicy, ChooseReturnsWhenTheUserSetThePolicy) {
  // Were the user's policy overridden, this would restart the test binary instead.
  setenv("OMP_WAIT_POLICY", "active", 1);
  setenv(kWaitPolicyMarker, "stray", 1);
  char name[] = "test_wait_policy";
  char* argv[] = {name, nullptr};
  EXPECT_EQ(choose_wait_policy(argv), "OpenMP wait policy: active (OMP_WAIT_POLICY)");
  EXPECT_EQ(std::getenv(kWaitPolicyMarker), nullptr) << "the marker is not passed on";
  EXPECT_STREQ(std::getenv("OMP_WAIT_POLICY"), "active");
  unsetenv("OMP_WAIT_POLICY");
}

}  // namespace
}  // namespace lat
