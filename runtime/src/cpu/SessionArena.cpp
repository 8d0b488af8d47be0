#include "cpu/SessionArena.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>

namespace dsrt {
namespace {

std::string str(const flatbuffers::String *s) { return s ? s->str() : std::string(); }

} // namespace

uint64_t arenaBytesOf(const dsp::Plan &header, const std::vector<std::string> &programs) {
  // The end of the last arena slot a chosen program (or a branch of it) uses.
  std::vector<bool> seen(header.programs() ? header.programs()->size() : 0, false);
  std::vector<int32_t> pending;
  for (const std::string &name : programs)
    for (uint32_t p = 0; p < seen.size(); ++p)
      if (str(header.programs()->Get(p)->name()) == name)
        pending.push_back(static_cast<int32_t>(p));
  uint64_t end = 0;
  auto reach = [&](const flatbuffers::Vector<int32_t> *indices) {
    for (uint32_t i = 0; indices && i < indices->size(); ++i) {
      int32_t t = indices->Get(i);
      if (t < 0)
        continue;
      const dsp::Tensor &tensor = *header.tensors()->Get(static_cast<uint32_t>(t));
      if (tensor.kind() == dsp::TensorKind::activation)
        end = std::max(end, tensor.arena_offset() + tensor.arena_bytes());
    }
  };
  while (!pending.empty()) {
    int32_t p = pending.back();
    pending.pop_back();
    if (seen[static_cast<size_t>(p)])
      continue;
    seen[static_cast<size_t>(p)] = true;
    const dsp::Program &program = *header.programs()->Get(static_cast<uint32_t>(p));
    reach(program.inputs());
    reach(program.outputs());
    reach(program.branch_outputs());
    for (uint32_t i = 0; program.steps() && i < program.steps()->size(); ++i) {
      const dsp::Step &step = *program.steps()->Get(i);
      reach(step.inputs());
      reach(step.outputs());
      for (uint32_t b = 0; step.branches() && b < step.branches()->size(); ++b)
        pending.push_back(step.branches()->Get(b));
    }
  }
  return end;
}

uint64_t physicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size)
                               : UINT64_MAX;
}

uint64_t availableMemoryBytes() {
  if (std::FILE *meminfo = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, meminfo))
      found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(meminfo);
    if (found)
      return static_cast<uint64_t>(kib) * 1024;
  }
  long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(size) : 0;
}

} // namespace dsrt
