// anvil: the thread pool the CPU backend runs its kernels on. parallel_for splits an index range into chunks
// that the calling thread and the pool's workers claim one at a time; it blocks until every chunk ran, so the
// body is passed by reference (no allocation per call). Between calls a worker first spins for a moment
// (thread_pool_spin), then sleeps on a condition variable: decoding a token makes about a hundred short
// parallel_for calls, and waking a sleeping thread cost tens of microseconds each on a virtual machine —
// more than the work of a call, which is why two threads decoded no faster than one.
// A worker that another process keeps off its core must not hold the caller up: the job is only offered to a
// worker, which takes it when it runs; when the caller has run out of chunks it withdraws the offers not yet
// taken and waits only for workers that took the job, each of which is finishing at most the chunk it
// claimed. (Waiting for every worker to check in made M=1 products 8x slower on 2 threads than on 1 while
// another process kept a core busy.)
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "anvil/compilation.hpp"

namespace anvil {

// The threads this process may run on at once: the CPUs in its affinity mask on Linux (containers and
// `taskset` restrict it), else std::thread::hardware_concurrency(); at least 1.
[[nodiscard]] std::size_t default_thread_count();

namespace detail {

inline constexpr std::size_t max_thread_count = 1024;

// How long an idle worker (and a caller waiting for workers) polls before it sleeps: long enough to span the
// gaps between a forward pass's calls, short enough that an idle pool soon stops using its cores.
inline constexpr std::chrono::microseconds thread_pool_spin{200};

// A short pause in a polling loop (the CPU's spin-wait hint where there is one).
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// The value of ANVIL_NUM_THREADS: a whole number from 1 to max_thread_count, nothing else.
[[nodiscard]] std::size_t parse_thread_count(std::string_view text);

// ANVIL_NUM_THREADS when set and not empty, else default_thread_count().
[[nodiscard]] std::size_t thread_count_from_environment();

// A non-owning reference to the chunk body; valid because parallel_for returns only after every chunk ran.
struct chunk_body {
    void* object;
    void (*call)(void* object, std::size_t begin, std::size_t end);
};

// True while this thread runs chunks (and always on a worker): a parallel_for started here runs inline,
// which is what keeps nested calls from waiting on the very threads that are busy running them.
inline thread_local bool running_chunks = false;

class running_chunks_scope {
public:
    running_chunks_scope() noexcept : previous_(running_chunks) { running_chunks = true; }
    ~running_chunks_scope() { running_chunks = previous_; }
    running_chunks_scope(const running_chunks_scope&) = delete;
    running_chunks_scope& operator=(const running_chunks_scope&) = delete;

private:
    bool previous_;
};

// One parallel_for: chunk i covers chunk_size indices (one more for the first `remainder` chunks).
struct parallel_job {
    chunk_body body;
    std::size_t begin = 0;
    std::size_t chunk_count = 0;
    std::size_t chunk_size = 0;
    std::size_t remainder = 0;
    std::atomic<std::size_t> next_chunk{0};
    // Workers offered this job that have neither finished with it nor had the offer withdrawn: the caller
    // returns (and the job, on its stack, ends) only when this is 0.
    std::atomic<std::size_t> workers_holding{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // written only by the thread that set `failed`

    // Takes chunks until none is left or one threw. Never throws.
    void run_chunks() noexcept;
};

// Gives tests access to a pool's workers (tests/test_thread_pool.cpp defines it); nothing else does.
struct thread_pool_test_access;

}  // namespace detail

class thread_pool {
public:
    // `threads` counts the calling thread, which runs chunks too: a pool of n starts n - 1 workers. 0 means
    // default_thread_count(). A pool of 1 runs everything inline.
    explicit thread_pool(std::size_t threads = 0);

    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    // Joins the workers. Must not run while a parallel_for on this pool is in flight.
    ~thread_pool() { stop_workers(); }

    // The threads that run chunks, the caller's included.
    [[nodiscard]] std::size_t size() const noexcept { return workers_.size() + 1; }

    // Calls body(chunk_begin, chunk_end) over [begin, end), split into chunks of at least `grain` indices (at
    // most four per thread, taken by whichever thread is free), and returns when all ran. body must be safe
    // to call from several threads at once. If a chunk throws, chunks not yet started are skipped and the
    // first exception is rethrown here once every running chunk finished. Calls from two outside threads
    // take turns; a call from inside a chunk (nested) runs inline as body(begin, end).
    template <class Body>
    void parallel_for(std::size_t begin, std::size_t end, std::size_t grain, Body&& body) {
        parallel_for(begin, end, grain, size(), std::forward<Body>(body));
    }

    // The same on at most `max_threads` threads, the caller's included (0 counts as 1): for work cut into
    // more chunks than it has threads' worth of, so that a thread that is slow to come costs one chunk.
    template <class Body>
    void parallel_for(std::size_t begin, std::size_t end, std::size_t grain, std::size_t max_threads,
                      Body&& body) {
        static_assert(std::is_invocable_v<Body&, std::size_t, std::size_t>,
                      "thread_pool::parallel_for: the body must be callable as body(std::size_t begin, "
                      "std::size_t end)");
        using body_type = std::remove_reference_t<Body>;
        const detail::chunk_body reference{const_cast<void*>(static_cast<const void*>(std::addressof(body))),
                                           [](void* object, std::size_t chunk_begin, std::size_t chunk_end) {
                                               (*static_cast<body_type*>(object))(chunk_begin, chunk_end);
                                           }};
        run(begin, end, grain, max_threads, reference);
    }

    // The same with the grain chosen for about four chunks per thread.
    template <class Body>
    void parallel_for(std::size_t begin, std::size_t end, Body&& body) {
        const std::size_t count = end > begin ? end - begin : 0;
        const std::size_t grain = std::max<std::size_t>(1, count / (size() * chunks_per_thread));
        parallel_for(begin, end, grain, std::forward<Body>(body));
    }

    // The process-wide pool, started on first use with ANVIL_NUM_THREADS threads when that is set, else
    // default_thread_count(). An invalid ANVIL_NUM_THREADS throws anvil::error (again on the next call).
    [[nodiscard]] static thread_pool& global();

    // The most chunks a parallel_for makes per thread; work cut finer is merged into this many.
    static constexpr std::size_t chunks_per_thread = 4;

private:
    friend struct detail::thread_pool_test_access;

    struct worker {
        std::thread thread;
        std::condition_variable wake;
        // A job offered by run(): the worker takes it by exchanging it for null, run() withdraws it the same
        // way, so exactly one of them gets it.
        std::atomic<detail::parallel_job*> offer{nullptr};
        // Set (under mutex_) before the worker waits on `wake`: run() takes the mutex to notify only then,
        // so a worker that is running, or was preempted while polling, costs the caller no lock.
        std::atomic<bool> sleeping{false};
    };

    void run(std::size_t begin, std::size_t end, std::size_t grain, std::size_t max_threads,
             detail::chunk_body body);
    // Offers `job` to `self` and wakes it if it sleeps; the caller has counted it in job.workers_holding.
    void offer(worker& self, detail::parallel_job& job);
    void worker_loop(worker& self);
    void stop_workers() noexcept;

    std::mutex submit_mutex_;  // one parallel_for at a time from outside threads
    std::mutex mutex_;         // orders a worker's decision to sleep against offers and stopping_
    std::atomic<bool> stopping_{false};
    std::vector<std::unique_ptr<worker>> workers_;
};

}  // namespace anvil

#if ANVIL_DEFINITIONS
#include "anvil/core/thread_pool-inl.hpp"
#endif
