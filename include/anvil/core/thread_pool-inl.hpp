// anvil: thread_pool's definitions (see thread_pool.hpp; compilation.hpp says when this file is compiled).
#pragma once

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
#include <utility>
#include <vector>

#include "anvil/core/error.hpp"
#include "anvil/core/thread_pool.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace anvil {

ANVIL_INLINE std::size_t default_thread_count() {
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

ANVIL_INLINE std::size_t parse_thread_count(std::string_view text) {
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

ANVIL_INLINE std::size_t thread_count_from_environment() {
    const char* value = std::getenv("ANVIL_NUM_THREADS");
    if (value == nullptr || *value == '\0') return default_thread_count();
    return parse_thread_count(value);
}

ANVIL_INLINE void parallel_job::run_chunks() noexcept {
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

}  // namespace detail

ANVIL_INLINE thread_pool::thread_pool(std::size_t threads) {
    if (threads == 0) threads = default_thread_count();
    workers_.reserve(threads - 1);
    for (std::size_t i = 1; i < threads; ++i) {
        try {
            auto slot = std::make_unique<worker>();
            slot->thread = std::thread([this, raw = slot.get()] { worker_loop(*raw); });
            workers_.push_back(std::move(slot));
        } catch (const std::exception& e) {
            stop_workers();
            throw error(detail::message("thread_pool: could not start thread ", i + 1, " of ", threads, ": ",
                                        e.what()));
        }
    }
}

ANVIL_INLINE thread_pool& thread_pool::global() {
    static thread_pool pool(detail::thread_count_from_environment());
    return pool;
}

ANVIL_INLINE void thread_pool::run(std::size_t begin, std::size_t end, std::size_t grain,
                                   std::size_t max_threads, detail::chunk_body body) {
    if (end <= begin) return;
    const std::size_t count = end - begin;
    const std::size_t thread_count = std::clamp<std::size_t>(max_threads, 1, size());
    const std::size_t chunk_count =
        std::min(count / std::max<std::size_t>(grain, 1), thread_count * chunks_per_thread);
    if (chunk_count <= 1 || thread_count == 1 || detail::running_chunks) {
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
    const std::size_t helpers = std::min(chunk_count - 1, thread_count - 1);
    job.workers_holding.store(helpers, std::memory_order_relaxed);
    for (std::size_t i = 0; i < helpers; ++i)
        offer(*workers_[i], job);
    {
        const detail::running_chunks_scope scope;
        job.run_chunks();
    }
    // Every chunk is claimed. A worker that has not taken its offer yet (asleep, or off its core) has no
    // part in the job: withdraw the offer instead of waiting for it to run.
    for (std::size_t i = 0; i < helpers; ++i) {
        if (workers_[i]->offer.exchange(nullptr) == &job)
            job.workers_holding.fetch_sub(1, std::memory_order_relaxed);
    }
    // The workers that took it finish their last chunks: poll, then yield the core (one may be waiting for
    // it). The acquire pairs with each worker's release, so their writes (and job.error) come before what
    // follows.
    const auto started = std::chrono::steady_clock::now();
    for (unsigned polls = 0; job.workers_holding.load(std::memory_order_acquire) != 0; ++polls) {
        detail::spin_pause();
        if (polls % 64 == 63 && std::chrono::steady_clock::now() - started > detail::thread_pool_spin)
            std::this_thread::yield();
    }
    if (job.error) std::rethrow_exception(job.error);
}

ANVIL_INLINE void thread_pool::offer(worker& self, detail::parallel_job& job) {
    // Sequentially consistent with the worker's `sleeping` store and its later look at `offer`: either this
    // sees it sleeping and notifies under the mutex, or the worker sees the offer before it waits.
    self.offer.store(&job);
    if (self.sleeping.load()) {
        const std::lock_guard<std::mutex> lock(mutex_);
        self.wake.notify_one();
    }
}

ANVIL_INLINE void thread_pool::worker_loop(worker& self) {
    detail::running_chunks = true;
    for (;;) {
        // Poll for an offer for a moment, then sleep until offer() or stop_workers() wakes this thread. An
        // offer may be withdrawn before it is taken (the caller ran every chunk): then poll again.
        detail::parallel_job* job = nullptr;
        auto idle_since = std::chrono::steady_clock::now();
        for (unsigned polls = 0; job == nullptr; ++polls) {
            if (self.offer.load(std::memory_order_relaxed) != nullptr) {
                job = self.offer.exchange(nullptr);
                if (job != nullptr) break;
            }
            if (stopping_.load(std::memory_order_acquire)) return;
            detail::spin_pause();
            if (polls % 64 == 63 &&
                std::chrono::steady_clock::now() - idle_since > detail::thread_pool_spin) {
                std::unique_lock<std::mutex> lock(mutex_);
                self.sleeping.store(true);
                self.wake.wait(lock, [&] {
                    return self.offer.load() != nullptr || stopping_.load(std::memory_order_acquire);
                });
                self.sleeping.store(false, std::memory_order_relaxed);
                idle_since = std::chrono::steady_clock::now();
            }
        }
        job->run_chunks();
        // Nothing of the job is touched after this: it lives on the stack of the run() that waits for it.
        job->workers_holding.fetch_sub(1, std::memory_order_acq_rel);
    }
}

ANVIL_INLINE void thread_pool::stop_workers() noexcept {
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        stopping_.store(true, std::memory_order_release);
    }
    for (auto& slot : workers_)
        slot->wake.notify_one();
    for (auto& slot : workers_) {
        if (slot->thread.joinable()) slot->thread.join();
    }
    workers_.clear();
}

}  // namespace anvil
