#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Offers a job to one worker of a pool, as run() does, so that a test can keep that worker busy elsewhere.
struct anvil::detail::thread_pool_test_access {
    static void offer(anvil::thread_pool& pool, std::size_t worker, anvil::detail::parallel_job& job) {
        pool.offer(*pool.workers_.at(worker), job);
    }
};

// A namespace of its own, so the test files can be compiled together (a unity build).
namespace test_thread_pool {

namespace {

using namespace std::chrono_literals;

// Runs a test body on its own thread with a deadline, so that a deadlock or lost wake-up fails the run
// instead of stalling CI. A hung thread cannot be cancelled, so past the deadline the process ends.
template <class Function>
void within(std::chrono::seconds deadline, const char* what, Function&& function) {
    std::packaged_task<void()> task(std::forward<Function>(function));
    auto done = task.get_future();
    std::thread runner(std::move(task));
    if (done.wait_for(deadline) != std::future_status::ready) {
        std::fprintf(stderr, "test_thread_pool: '%s' did not finish within %lld s: a hang; exiting\n", what,
                     static_cast<long long>(deadline.count()));
        std::fflush(stderr);
        std::_Exit(1);
    }
    runner.join();
    done.get();  // rethrows what the body threw, so doctest reports it
}

// Runs parallel_for and checks that every index ran exactly once, in chunks of at least the grain.
void check_coverage(anvil::thread_pool& pool, std::size_t begin, std::size_t end, std::size_t grain) {
    const std::size_t count = end > begin ? end - begin : 0;
    std::vector<std::atomic<int>> hits(count);
    std::atomic<bool> chunk_out_of_range{false}, chunk_too_small{false};
    const std::size_t smallest_allowed = std::min(std::max<std::size_t>(grain, 1), count);
    pool.parallel_for(begin, end, grain, [&](std::size_t chunk_begin, std::size_t chunk_end) {
        if (chunk_begin < begin || chunk_end > end || chunk_begin >= chunk_end) {
            chunk_out_of_range = true;
            return;
        }
        if (chunk_end - chunk_begin < smallest_allowed) chunk_too_small = true;
        for (std::size_t i = chunk_begin; i < chunk_end; ++i)
            hits[i - begin].fetch_add(1);
    });
    CAPTURE(pool.size());
    CAPTURE(begin);
    CAPTURE(end);
    CAPTURE(grain);
    CHECK_FALSE(chunk_out_of_range.load());
    CHECK_FALSE(chunk_too_small.load());
    const auto not_once =
        std::count_if(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h != 1; });
    CHECK(not_once == 0);
}

std::string error_message(const std::string& value) {
    try {
        (void)anvil::detail::parse_thread_count(value);
    } catch (const anvil::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("thread_pool: every index runs exactly once for many ranges, grains and sizes") {
    within(120s, "coverage", [] {
        const std::pair<std::size_t, std::size_t> ranges[] = {{0, 0},  {5, 5},     {9, 3},    {0, 1},
                                                              {0, 3},  {10, 13},   {0, 64},   {17, 1017},
                                                              {0, 97}, {3, 10003}, {0, 65536}};
        const std::size_t grains[] = {0, 1, 2, 3, 7, 64, 1000, 5000, 1000000};
        for (const std::size_t threads : {1, 2, 3, 4, 8}) {
            anvil::thread_pool pool(threads);
            REQUIRE(pool.size() == threads);
            for (const auto& [begin, end] : ranges) {
                for (const std::size_t grain : grains)
                    check_coverage(pool, begin, end, grain);
            }
        }
    });
}

TEST_CASE("thread_pool: the overload without a grain covers the range too") {
    within(60s, "default grain", [] {
        anvil::thread_pool pool(4);
        for (const std::size_t end : {0, 1, 2, 5, 100, 4097}) {
            std::vector<std::atomic<int>> hits(end);
            pool.parallel_for(0, end, [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i)
                    hits[i].fetch_add(1);
            });
            CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h == 1; }));
        }
    });
}

TEST_CASE("thread_pool: chunks really run on two threads at once") {
    within(60s, "parallelism", [] {
        anvil::thread_pool pool(2);
        std::atomic<int> entered{0};
        std::atomic<bool> saw_both{false};
        // Each chunk waits for the other: only a pool that runs them concurrently lets both see 2.
        pool.parallel_for(0, 2, 1, [&](std::size_t, std::size_t) {
            entered.fetch_add(1);
            const auto give_up = std::chrono::steady_clock::now() + 20s;
            while (entered.load() < 2 && std::chrono::steady_clock::now() < give_up)
                std::this_thread::yield();
            if (entered.load() == 2) saw_both = true;
        });
        CHECK(saw_both.load());
    });
}

TEST_CASE("thread_pool: a pool of one runs the whole range inline, in one call") {
    within(30s, "inline pool", [] {
        anvil::thread_pool pool(1);
        CHECK(pool.size() == 1);
        std::vector<std::pair<std::size_t, std::size_t>> calls;
        std::thread::id ran_on;
        pool.parallel_for(3, 1000, 1, [&](std::size_t b, std::size_t e) {
            calls.emplace_back(b, e);
            ran_on = std::this_thread::get_id();
        });
        CHECK(calls == std::vector<std::pair<std::size_t, std::size_t>>{{3, 1000}});
        CHECK(ran_on == std::this_thread::get_id());
        CHECK_THROWS_WITH_AS(
            pool.parallel_for(0, 10, 1, [](std::size_t, std::size_t) { throw std::runtime_error("x"); }), "x",
            std::runtime_error);
    });
}

TEST_CASE(
    "thread_pool: the first exception reaches the caller, later chunks are skipped, the pool stays usable") {
    within(60s, "exceptions", [] {
        anvil::thread_pool pool(4);
        for (int round = 0; round < 50; ++round) {
            std::atomic<int> ran{0};
            // Every chunk throws, so each thread runs at most one chunk before it sees the failure.
            CHECK_THROWS_WITH_AS(pool.parallel_for(0, 1000, 1,
                                                   [&](std::size_t b, std::size_t) {
                                                       ran.fetch_add(1);
                                                       throw std::runtime_error("chunk " + std::to_string(b));
                                                   }),
                                 doctest::Contains("chunk "), std::runtime_error);
            CHECK(ran.load() >= 1);
            CHECK(ran.load() <= static_cast<int>(pool.size()));
        }
        // One chunk of many throws a non-std type; it still arrives intact.
        try {
            pool.parallel_for(0, 64, 1, [](std::size_t b, std::size_t) {
                if (b == 40) throw 40;
            });
            FAIL("no exception");
        } catch (int value) {
            CHECK(value == 40);
        }
        check_coverage(pool, 0, 10000, 1);
        check_coverage(pool, 0, 3, 1);
    });
}

TEST_CASE("thread_pool: a parallel_for inside a chunk runs inline instead of deadlocking") {
    within(60s, "nested", [] {
        anvil::thread_pool pool(4);
        anvil::thread_pool other(3);
        std::vector<std::atomic<int>> hits(16 * 100);
        std::atomic<bool> inner_moved_thread{false};
        pool.parallel_for(0, 16, 1, [&](std::size_t ob, std::size_t oe) {
            for (std::size_t outer = ob; outer < oe; ++outer) {
                const auto outer_thread = std::this_thread::get_id();
                anvil::thread_pool& inner_pool = outer % 2 == 0 ? pool : other;
                inner_pool.parallel_for(0, 100, 1, [&](std::size_t ib, std::size_t ie) {
                    if (std::this_thread::get_id() != outer_thread) inner_moved_thread = true;
                    for (std::size_t inner = ib; inner < ie; ++inner)
                        hits[outer * 100 + inner].fetch_add(1);
                });
            }
        });
        CHECK_FALSE(inner_moved_thread.load());
        CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h == 1; }));
    });
}

TEST_CASE("thread_pool: a caller whose worker is absent runs every chunk itself and does not wait for it") {
    within(60s, "absent worker", [] {
        anvil::thread_pool pool(2);
        // The only worker takes a job of its own and stays in its chunk until released: to the pool it is
        // a worker that is not running, as one is while another process has its core.
        std::atomic<bool> held{false}, release{false};
        std::thread::id worker_thread;
        auto hold = [&](std::size_t, std::size_t) {
            worker_thread = std::this_thread::get_id();
            held = true;
            while (!release.load())
                std::this_thread::yield();
        };
        anvil::detail::parallel_job side;
        side.body = {&hold, [](void* object, std::size_t b, std::size_t e) {
                         (*static_cast<decltype(hold)*>(object))(b, e);
                     }};
        side.chunk_count = 1;
        side.chunk_size = 1;
        side.workers_holding = 1;
        anvil::detail::thread_pool_test_access::offer(pool, 0, side);
        while (!held.load())
            std::this_thread::yield();

        // Offered to the absent worker too, the job completes on the calling thread alone, while the worker
        // is still held: the caller did not wait for it.
        for (int call = 0; call < 100; ++call) {
            std::vector<std::thread::id> ran_on(64);
            pool.parallel_for(0, ran_on.size(), 1, [&](std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i)
                    ran_on[i] = std::this_thread::get_id();
            });
            CHECK(std::all_of(ran_on.begin(), ran_on.end(),
                              [](std::thread::id id) { return id == std::this_thread::get_id(); }));
        }
        CHECK(side.workers_holding.load() == 1);
        CHECK_FALSE(release.load());

        // Back on its core, the worker finishes its chunk and takes part in the next jobs again.
        release = true;
        while (side.workers_holding.load() != 0)
            std::this_thread::yield();
        std::atomic<int> entered{0};
        std::set<std::thread::id> threads;
        std::mutex threads_mutex;
        pool.parallel_for(0, 2, 1, [&](std::size_t, std::size_t) {
            entered.fetch_add(1);
            while (entered.load() < 2)
                std::this_thread::yield();
            const std::lock_guard<std::mutex> lock(threads_mutex);
            threads.insert(std::this_thread::get_id());
        });
        CHECK(threads.count(worker_thread) == 1);
        CHECK(threads.size() == 2);
    });
}

TEST_CASE("thread_pool: two outside threads hammering one pool both get correct results") {
    within(120s, "two callers", [] {
        anvil::thread_pool pool(3);
        std::atomic<bool> wrong{false};
        auto caller = [&](std::size_t length) {
            for (int call = 0; call < 2000; ++call) {
                std::atomic<std::size_t> sum{0};
                pool.parallel_for(0, length, 1, [&](std::size_t b, std::size_t e) {
                    for (std::size_t i = b; i < e; ++i)
                        sum.fetch_add(i + 1);
                });
                if (sum.load() != length * (length + 1) / 2) wrong = true;
            }
        };
        std::thread first(caller, 37);
        std::thread second(caller, 101);
        first.join();
        second.join();
        CHECK_FALSE(wrong.load());
    });
}

TEST_CASE("thread_pool: 20000 tiny calls in a row lose no wake-up") {
    within(120s, "stress", [] {
        anvil::thread_pool pool(4);
        std::atomic<std::size_t> total{0};
        for (int call = 0; call < 20000; ++call) {
            pool.parallel_for(0, 8, 1, [&](std::size_t b, std::size_t e) { total.fetch_add(e - b); });
        }
        CHECK(total.load() == 20000u * 8u);
    });
}

TEST_CASE("thread_pool: pools start and stop cleanly, used or idle") {
    within(120s, "destruction", [] {
        for (int round = 0; round < 200; ++round) {
            anvil::thread_pool idle(static_cast<std::size_t>(round % 5 + 1));
            if (round % 2 == 0) check_coverage(idle, 0, 50, 1);
        }
        auto pool = std::make_unique<anvil::thread_pool>(4);
        check_coverage(*pool, 0, 100, 1);
        std::this_thread::sleep_for(10ms);  // the workers are asleep now
        pool.reset();
        CHECK(pool == nullptr);
    });
}

TEST_CASE("thread_pool: sizes come from the hardware and the affinity mask") {
    const std::size_t count = anvil::default_thread_count();
    CHECK(count >= 1);
    if (std::thread::hardware_concurrency() != 0) CHECK(count <= std::thread::hardware_concurrency());
#if defined(__linux__)
    // Independent reference: the kernel's own list of CPUs this process may run on, e.g. "0-3,8".
    std::ifstream status("/proc/self/status");
    std::string line;
    std::size_t allowed = 0;
    while (std::getline(status, line)) {
        if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
        std::istringstream list(line.substr(line.find(':') + 1));
        std::string item;
        while (std::getline(list, item, ',')) {
            const auto dash = item.find('-');
            const std::size_t first = std::stoul(item.substr(0, dash));
            const std::size_t last = dash == std::string::npos ? first : std::stoul(item.substr(dash + 1));
            allowed += last - first + 1;
        }
    }
    if (allowed > 0) CHECK(count == allowed);
#endif
    within(30s, "default size", [] {
        anvil::thread_pool pool;
        CHECK(pool.size() == anvil::default_thread_count());
        anvil::thread_pool zero(0);
        CHECK(zero.size() == anvil::default_thread_count());
    });
}

TEST_CASE("thread_pool: the global pool is one pool and runs work") {
    within(30s, "global", [] {
        anvil::thread_pool& pool = anvil::thread_pool::global();
        CHECK(&pool == &anvil::thread_pool::global());
        CHECK(pool.size() >= 1);
        check_coverage(pool, 0, 1000, 1);
    });
}

TEST_CASE("thread_pool: ANVIL_NUM_THREADS accepts a whole number from 1 to 1024 and names itself otherwise") {
    CHECK(anvil::detail::parse_thread_count("1") == 1);
    CHECK(anvil::detail::parse_thread_count("4") == 4);
    CHECK(anvil::detail::parse_thread_count("0016") == 16);
    CHECK(anvil::detail::parse_thread_count("000000000000000000000002") == 2);
    CHECK(anvil::detail::parse_thread_count("1024") == 1024);
    CHECK(error_message("abc") ==
          "ANVIL_NUM_THREADS='abc': expected a whole number of threads from 1 to 1024 (unset it to use every "
          "CPU "
          "this process may run on)");
    CHECK(error_message("1025") ==
          "ANVIL_NUM_THREADS='1025': expected a whole number of threads from 1 to 1024 (unset it to use "
          "every CPU "
          "this process may run on)");
    for (const char* bad :
         {"", "0", "-1", "+4", " 4", "4 ", "4.0", "0x10", "99999", "18446744073709551620", "4\n"}) {
        CAPTURE(bad);
        CHECK(error_message(bad).rfind("ANVIL_NUM_THREADS='", 0) == 0);
    }
    const std::string long_value(100, '7');
    CHECK(error_message(long_value) ==
          "ANVIL_NUM_THREADS='" + std::string(32, '7') +
              "...': expected a whole number of threads from 1 to 1024 (unset it to "
              "use every CPU this process may run on)");
}

}  // namespace test_thread_pool
