#include "ops/AvailableCpus.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace dsrt::ops {
namespace {

bool readFile(const std::string &path, std::string &text) {
  std::ifstream in(path);
  if (!in)
    return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return true;
}

// A whole decimal number (leading and trailing white space allowed), else false.
bool parseNumber(const std::string &text, long long &value) {
  const char *begin = text.c_str();
  char *end = nullptr;
  value = std::strtoll(begin, &end, 10);
  if (end == begin)
    return false;
  while (*end == ' ' || *end == '\n' || *end == '\t')
    ++end;
  return *end == '\0';
}

// `leaf` and each directory above it up to `root` (both included; leaf is root + "/..." ).
std::vector<std::string> upFrom(const std::string &root, std::string leaf) {
  std::vector<std::string> dirs;
  while (leaf.size() > root.size()) {
    dirs.push_back(leaf);
    leaf.erase(leaf.find_last_of('/'));
  }
  dirs.push_back(root);
  return dirs;
}

// The least CPU count a quota of the process's cgroups (v2, or v1's cpu controller) allows; 0
// for none. A container sees its own cgroup as "/" (a cgroup namespace); without one the path
// is the host's, under the same mount.
int cgroupCpus() {
  std::ifstream self("/proc/self/cgroup");
  int least = 0;
  auto consider = [&](int cpus) {
    if (cpus > 0)
      least = least == 0 ? cpus : std::min(least, cpus);
  };
  for (std::string line; std::getline(self, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos)
      continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/")
      path.clear();
    if (controllers.empty()) {  // v2: "0::/path"
      for (const std::string &dir : upFrom("/sys/fs/cgroup", "/sys/fs/cgroup" + path)) {
        std::string text;
        if (readFile(dir + "/cpu.max", text))
          consider(cpusOfQuota(text));
      }
      continue;
    }
    std::stringstream names(controllers);
    bool cpu = false;
    for (std::string name; std::getline(names, name, ',');)
      cpu = cpu || name == "cpu";
    if (!cpu)
      continue;
    for (const char *mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
      for (const std::string &dir : upFrom(mount, mount + path)) {
        std::string quota, period;
        long long q = 0, p = 0;
        if (readFile(dir + "/cpu.cfs_quota_us", quota) &&
            readFile(dir + "/cpu.cfs_period_us", period) && parseNumber(quota, q) &&
            parseNumber(period, p))
          consider(cpusOfQuota(q, p));
      }
  }
  return least;
}

int affinityCpus() {
#if defined(__linux__)
  // Masks as large as the kernel's CPU limit: a fixed cpu_set_t holds 1024 CPUs only.
  for (int size = 1024; size <= (1 << 16); size *= 2) {
    cpu_set_t *mask = CPU_ALLOC(size);
    if (!mask)
      break;
    const size_t bytes = CPU_ALLOC_SIZE(size);
    CPU_ZERO_S(bytes, mask);
    if (sched_getaffinity(0, bytes, mask) == 0) {
      const int count = CPU_COUNT_S(bytes, mask);
      CPU_FREE(mask);
      return count;
    }
    CPU_FREE(mask);
  }
#endif
  const unsigned hardware = std::thread::hardware_concurrency();
  return static_cast<int>(hardware);
}

} // namespace

int cpusOfQuota(long long quotaMicros, long long periodMicros) {
  if (quotaMicros <= 0 || periodMicros <= 0)
    return 0;
  return static_cast<int>(std::min<long long>((quotaMicros + periodMicros - 1) / periodMicros,
                                              1 << 20));
}

int cpusOfQuota(const std::string &cpuMax) {
  std::istringstream in(cpuMax);
  std::string quota, period;
  if (!(in >> quota >> period))
    return 0;
  long long q = 0, p = 0;
  if (quota == "max" || !parseNumber(quota, q) || !parseNumber(period, p))
    return 0;
  return cpusOfQuota(q, p);
}

int availableCpus() {
  int cpus = affinityCpus();
  if (const int quota = cgroupCpus(); quota > 0)
    cpus = cpus > 0 ? std::min(cpus, quota) : quota;
  return std::max(cpus, 1);
}

int defaultThreadCount() {
  static const int threads = [] {
    if (const char *text = std::getenv("DSRT_NUM_THREADS"); text && *text) {
      long long value = 0;
      if (parseNumber(text, value) && value >= 0 && value <= 4096)
        return value > 0 ? static_cast<int>(value) : availableCpus();
      const int fallback = availableCpus();
      std::fprintf(stderr,
                   "dsrt: DSRT_NUM_THREADS=%s is not a thread count (0 to 4096); using the %d "
                   "CPUs this process may run on\n",
                   text, fallback);
      return fallback;
    }
    return availableCpus();
  }();
  return threads;
}

} // namespace dsrt::ops
