// The threading API of TVM 0.16's tvm/runtime/threading_backend.h: the free functions configure the
// core's process-wide pool (src/backend/thread_pool.rs), and ThreadGroup runs a host's callback on
// threads of its own, placed on the cores a mode names (src/backend/affinity.rs chooses them).
//
// Declarations are this file's own, matching upstream's names for the mangling: ThreadGroup holds
// one Impl pointer; std::function and std::vector travel by invisible reference.

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bridge.h"

#define TVMRT_EXPORT __attribute__((visibility("default")))

namespace tvm {
namespace runtime {
namespace threading {

class TVMRT_EXPORT ThreadGroup {
 public:
  class Impl;
  enum AffinityMode : int { kBig = 1, kLittle = -1, kSpecifyOneCorePerThread = -2, kSpecifyThreadShareAllCore = -3 };
  ThreadGroup(int num_workers, std::function<void(int)> worker_callback, bool exclude_worker0 = false);
  ~ThreadGroup();
  void Join();
  int Configure(AffinityMode mode, int nthreads, bool exclude_worker0, std::vector<unsigned int> cpus = {});

 private:
  Impl* impl_;
};
static_assert(sizeof(ThreadGroup) == sizeof(void*), "upstream's ThreadGroup holds one pointer");

TVMRT_EXPORT void Yield();
TVMRT_EXPORT int MaxConcurrency();
TVMRT_EXPORT void SetMaxConcurrency(int value);
TVMRT_EXPORT void ResetThreadPool();
TVMRT_EXPORT void Configure(ThreadGroup::AffinityMode mode, int nthreads, std::vector<unsigned int> cpus);
TVMRT_EXPORT int32_t NumThreads();

namespace {
[[noreturn]] void Fail() { tvmrt::ThrowLastError(); }

// The cores of `mode` (the listed ones for the listing modes).
std::vector<unsigned> CoresFor(int mode, const std::vector<unsigned>& listed) {
  // Every core a cpu_set_t can name: one call fills them all.
  std::vector<unsigned> cores(std::max<size_t>(CPU_SETSIZE, listed.size()));
  int n = tvmrt_threading_cores(mode, listed.data(), listed.size(), cores.data(), cores.size());
  if (n < 0) Fail();
  cores.resize(std::min<size_t>(n, cores.size()));
  return cores;
}

// Pins `thread` to `cores` (nothing when empty); a refusal leaves it where it was.
void Pin(pthread_t thread, const std::vector<unsigned>& cores) {
  if (cores.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c : cores)
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  pthread_setaffinity_np(thread, sizeof(set), &set);
}
}  // namespace

class ThreadGroup::Impl {
 public:
  Impl(int num_workers, std::function<void(int)> callback, bool exclude_worker0) : num_workers_(num_workers) {
    for (int id = exclude_worker0 ? 1 : 0; id < num_workers; ++id) threads_.emplace_back(callback, id);
  }
  ~Impl() { Join(); }
  void Join() {
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  int Configure(AffinityMode mode, int nthreads, bool exclude_worker0, const std::vector<unsigned>& cpus) {
    std::vector<unsigned> cores = CoresFor(mode, cpus);
    int used = nthreads ? nthreads : (cores.empty() ? MaxConcurrency() : static_cast<int>(cores.size()));
    used = std::max(1, std::min(used, num_workers_));
    bool one_per_thread = mode == kSpecifyOneCorePerThread;
    // Worker i of the group is thread i (or i - 1 when worker 0 is the caller).
    for (size_t i = 0; i < threads_.size(); ++i) {
      size_t worker = i + (exclude_worker0 ? 1 : 0);
      if (cores.empty() || !threads_[i].joinable()) continue;
      Pin(threads_[i].native_handle(), one_per_thread ? std::vector<unsigned>{cores[worker % cores.size()]} : cores);
    }
    if (exclude_worker0) Pin(pthread_self(), cores);
    return used;
  }

 private:
  int num_workers_;
  std::vector<std::thread> threads_;
};

ThreadGroup::ThreadGroup(int num_workers, std::function<void(int)> worker_callback, bool exclude_worker0)
    : impl_(new Impl(num_workers, std::move(worker_callback), exclude_worker0)) {}

ThreadGroup::~ThreadGroup() { delete impl_; }

void ThreadGroup::Join() { impl_->Join(); }

int ThreadGroup::Configure(AffinityMode mode, int nthreads, bool exclude_worker0, std::vector<unsigned int> cpus) {
  return impl_->Configure(mode, nthreads, exclude_worker0, cpus);
}

void Yield() { std::this_thread::yield(); }

int MaxConcurrency() { return tvmrt_threading_max_concurrency(); }

void SetMaxConcurrency(int value) { tvmrt_threading_set_max_concurrency(value); }

void ResetThreadPool() { tvmrt_threading_reset(); }

void Configure(ThreadGroup::AffinityMode mode, int nthreads, std::vector<unsigned int> cpus) {
  if (tvmrt_threading_configure(mode, nthreads, cpus.data(), cpus.size(), nullptr) != 0) Fail();
}

int32_t NumThreads() { return tvmrt_threading_num_threads(); }

}  // namespace threading
}  // namespace runtime
}  // namespace tvm
