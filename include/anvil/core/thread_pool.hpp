// anvil: the thread pool the CPU backend runs its kernels on. parallel_for splits an index range into chunks
// that the calling thread and the pool's workers take in turn; it blocks until every chunk ran, so the body
// is passed by reference (no allocation per call). Workers sleep on a condition variable between calls.
#pragma once

#include "anvil/core/error.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace anvil {

// The threads this process may run on at once: the CPUs in its affinity mask on Linux (containers and
// `taskset` restrict it), else std::thread::hardware_concurrency(); at least 1.
[[nodiscard]] inline std::size_t default_thread_count() {
    std::size_t count = std::thread::hardware_concurrency();
#if defined(__linux__)
    // A cpu_set_t covers 1024 CPUs; on a larger machine sched_getaffinity fails and the hardware count
    // stands.
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
        const int in_mask = CPU_COUNT(&allowed);
        if (in_mask > 0) count = static_cast<std::size_t>(in_mask);
    }
#endif
    return std::max<std::size_t>(count, 1);
}

namespace detail {

inline constexpr std::size_t max_thread_count = 1024;

// The value of ANVIL_NUM_THREADS: a whole number from 1 to max_thread_count, nothing else.
[[nodiscard]] inline std::size_t parse_thread_count(std::string_view text) {
    std::size_t count = 0;
    bool valid = !text.empty();
    for (const char c : text) {
        if (c < '0' || c > '9') {
            valid = false;
            break;
        }
        count =
            std::min(count * 10 + static_cast<std::size_t>(c - '0'), max_thread_count + 1);  // no wrap-around
    }
    if (!valid || count == 0 || count > max_thread_count) {
        const std::string_view shown = text.substr(0, 32);
        throw error(message("ANVIL_NUM_THREADS='", shown, shown.size() < text.size() ? "...'" : "'",
                            ": expected a whole number of threads from 1 to ", max_thread_count,
                            " (unset it to use every CPU this process may run on)"));
    }
    return count;
}

// ANVIL_NUM_THREADS when set and not empty, else default_thread_count().
[[nodiscard]] inline std::size_t thread_count_from_environment() {
    const char* value = std::getenv("ANVIL_NUM_THREADS");
    if (value == nullptr || *value == '\0') return default_thread_count();
    return parse_thread_count(value);
}

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
    std::atomic<bool> failed{false};
    std::exception_ptr error;  // written only by the thread that set `failed`

    // Takes chunks until none is left or one threw. Never throws.
    void run_chunks() noexcept {
        while (!failed.load(std::memory_order_relaxed)) {
            const std::size_t chunk = next_chunk.fetch_add(1, std::memory_order_relaxed);
            if (chunk >= chunk_count) return;
            const std::size_t first = begin + chunk * chunk_size + std::min(chunk, remainder);
            const std::size_t last = first + chunk_size + (chunk < remainder ? 1 : 0);
            try {
                body.call(body.object, first, last);
            } catch (...) {
                if (!failed.exchange(true, std::memory_order_relaxed)) error = std::current_exception();
                return;
            }
        }
    }
};

}  // namespace detail

class thread_pool {
public:
    // `threads` counts the calling thread, which runs chunks too: a pool of n starts n - 1 workers. 0 means
    // default_thread_count(). A pool of 1 runs everything inline.
    explicit thread_pool(std::size_t threads = 0) {
        if (threads == 0) threads = default_thread_count();
        workers_.reserve(threads - 1);
        for (std::size_t i = 1; i < threads; ++i) {
            try {
                auto slot = std::make_unique<worker>();
                slot->thread = std::thread([this, raw = slot.get()] { worker_loop(*raw); });
                workers_.push_back(std::move(slot));
            } catch (const std::exception& e) {
                stop_workers();
                throw error(detail::message("thread_pool: could not start thread ", i + 1, " of ", threads,
                                            ": ", e.what()));
            }
        }
    }

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
        static_assert(std::is_invocable_v<Body&, std::size_t, std::size_t>,
                      "thread_pool::parallel_for: the body must be callable as body(std::size_t begin, "
                      "std::size_t end)");
        using body_type = std::remove_reference_t<Body>;
        const detail::chunk_body reference{const_cast<void*>(static_cast<const void*>(std::addressof(body))),
                                           [](void* object, std::size_t chunk_begin, std::size_t chunk_end) {
                                               (*static_cast<body_type*>(object))(chunk_begin, chunk_end);
                                           }};
        run(begin, end, grain, reference);
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
    [[nodiscard]] static thread_pool& global() {
        static thread_pool pool(detail::thread_count_from_environment());
        return pool;
    }

private:
    static constexpr std::size_t chunks_per_thread = 4;

    struct worker {
        std::thread thread;
        std::condition_variable wake;
        detail::parallel_job* job = nullptr;  // guarded by mutex_
    };

    void run(std::size_t begin, std::size_t end, std::size_t grain, detail::chunk_body body) {
        if (end <= begin) return;
        const std::size_t count = end - begin;
        const std::size_t chunk_count =
            std::min(count / std::max<std::size_t>(grain, 1), size() * chunks_per_thread);
        if (chunk_count <= 1 || workers_.empty() || detail::running_chunks) {
            body.call(body.object, begin, end);
            return;
        }

        detail::parallel_job job;
        job.body = body;
        job.begin = begin;
        job.chunk_count = chunk_count;
        job.chunk_size = count / chunk_count;
        job.remainder = count % chunk_count;

        const std::lock_guard<std::mutex> one_call_at_a_time(submit_mutex_);
        const std::size_t helpers = std::min(chunk_count - 1, workers_.size());
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            busy_workers_ = helpers;
            for (std::size_t i = 0; i < helpers; ++i)
                workers_[i]->job = &job;
        }
        for (std::size_t i = 0; i < helpers; ++i)
            workers_[i]->wake.notify_one();
        {
            const detail::running_chunks_scope scope;
            job.run_chunks();
        }
        {
            // Also orders the workers' writes (and job.error) before everything after parallel_for.
            std::unique_lock<std::mutex> lock(mutex_);
            done_.wait(lock, [this] { return busy_workers_ == 0; });
        }
        if (job.error) std::rethrow_exception(job.error);
    }

    void worker_loop(worker& self) {
        detail::running_chunks = true;
        std::unique_lock<std::mutex> lock(mutex_);
        for (;;) {
            self.wake.wait(lock, [&] { return self.job != nullptr || stopping_; });
            if (self.job == nullptr) return;  // stopping
            detail::parallel_job* job = self.job;
            lock.unlock();
            job->run_chunks();
            lock.lock();
            self.job = nullptr;
            if (--busy_workers_ == 0) done_.notify_one();
        }
    }

    void stop_workers() noexcept {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        for (auto& slot : workers_)
            slot->wake.notify_one();
        for (auto& slot : workers_) {
            if (slot->thread.joinable()) slot->thread.join();
        }
        workers_.clear();
    }

    std::mutex submit_mutex_;  // one parallel_for at a time from outside threads
    std::mutex mutex_;         // guards worker::job, busy_workers_, stopping_
    std::condition_variable done_;
    std::size_t busy_workers_ = 0;
    bool stopping_ = false;
    std::vector<std::unique_ptr<worker>> workers_;
};

}  // namespace anvil
