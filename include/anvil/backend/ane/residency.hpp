// anvil: the Neural Engine programs this process keeps loaded, and making room for one more. The device holds
// a bounded number of loaded programs (about 55; about 15 when autoreleased objects leak; RUNTIME.md §0b #23,
// TMC), and a full pool is not transient: a compile or load refused with 0x50004 succeeds only once another
// program is unloaded. So every program anvil loads is registered here with its last use; when the device is
// full (or `compile_options::ane_max_loaded_programs` is reached) the least recently used program that is
// not running is unloaded, and loaded again, on its next run, the same way. A decoder LM climbing its
// context ladder thus unloads the rungs it left rather than sending the next rung to the CPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "anvil/backend/ane/ane_framework.hpp"

namespace anvil::detail::ane {

class loaded_programs {
public:
    // One per process: the device's pool is shared by every program anvil compiles.
    static loaded_programs& instance() {
        static auto* pool =
            new loaded_programs();  // never destroyed: programs may outlive static destructors
        return *pool;
    }

    // Compiles `model`; when the device is full, unloads the least recently used idle program and tries
    // again, until it compiles or nothing is left to unload (then the device's refusal stands).
    void compile(ane_model& model, bool cache_locked) {
        for (;;) {
            try {
                model.compile(cache_locked);
                return;
            } catch (const device_full&) {
                if (!unload_one(&model)) throw;
            }
        }
    }

    // Loads `model` (nothing when it is loaded), first unloading idle programs down to `cap` loaded ones
    // (0: no cap), and, when the device says it is full, one more each time until it loads.
    void load(ane_model& model, const load_retry_policy& retry, std::size_t cap) {
        {
            const std::lock_guard lock(mutex_);
            if (model.loaded()) {
                touch(model);
                return;
            }
            while (cap > 0 && entries_.size() >= cap && unload_one_locked(&model)) {
            }
        }
        for (;;) {
            try {
                model.load(retry);
                break;
            } catch (const device_full&) {
                if (!unload_one(&model)) throw;
            }
        }
        const std::lock_guard lock(mutex_);
        touch(model);
    }

    // A program being evaluated: it is not unloaded to make room until the pin goes.
    class pin {
    public:
        pin(loaded_programs& pool, const ane_model& model) : pool_(&pool), model_(&model) {}
        pin(pin&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)), model_(other.model_) {}
        pin(const pin&) = delete;
        pin& operator=(const pin&) = delete;
        pin& operator=(pin&&) = delete;
        ~pin() {
            if (pool_ != nullptr) pool_->release(*model_);
        }

    private:
        loaded_programs* pool_;
        const ane_model* model_;
    };

    // Pins `model` for an evaluation, loading it again first when it was unloaded to make room; `reloaded`
    // says so (its requests are then made again).
    [[nodiscard]] pin use(ane_model& model, const load_retry_policy& retry, std::size_t cap, bool& reloaded) {
        reloaded = false;
        {
            const std::lock_guard lock(mutex_);
            if (model.loaded()) {
                entry& e = touch(model);
                ++e.pins;
                return pin(*this, model);
            }
        }
        load(model, retry, cap);
        reloaded = true;
        const std::lock_guard lock(mutex_);
        entry& e = touch(model);
        ++e.pins;
        return pin(*this, model);
    }

    // `model` is going away (its owner unloads and releases it): it is no longer one to unload.
    void forget(const ane_model& model) noexcept {
        const std::lock_guard lock(mutex_);
        std::erase_if(entries_, [&](const entry& e) { return e.model == &model; });
    }

    // Programs unloaded to make room since the process started.
    [[nodiscard]] std::size_t unloaded_for_room() const {
        const std::lock_guard lock(mutex_);
        return unloaded_;
    }

    // Programs loaded through this pool and not unloaded.
    [[nodiscard]] std::size_t loaded_count() const {
        const std::lock_guard lock(mutex_);
        return entries_.size();
    }

private:
    struct entry {
        ane_model* model = nullptr;
        std::uint64_t last_use = 0;
        int pins = 0;  // evaluations under way
    };

    loaded_programs() = default;

    entry& touch(ane_model& model) {
        auto found =
            std::find_if(entries_.begin(), entries_.end(), [&](const entry& e) { return e.model == &model; });
        if (found == entries_.end()) {
            entries_.push_back({&model, 0, 0});
            found = entries_.end() - 1;
        }
        found->last_use = ++clock_;
        return *found;
    }

    void release(const ane_model& model) noexcept {
        const std::lock_guard lock(mutex_);
        for (entry& e : entries_)
            if (e.model == &model && e.pins > 0) --e.pins;
    }

    bool unload_one(const ane_model* keep) {
        const std::lock_guard lock(mutex_);
        return unload_one_locked(keep);
    }

    // Unloads the least recently used program that is not `keep` and not being evaluated. The unload happens
    // under the lock, so its owner cannot use it meanwhile: the owner finds it unloaded and loads it again.
    bool unload_one_locked(const ane_model* keep) {
        auto victim = entries_.end();
        for (auto it = entries_.begin(); it != entries_.end(); ++it) {
            if (it->model == keep || it->pins > 0) continue;
            if (victim == entries_.end() || it->last_use < victim->last_use) victim = it;
        }
        if (victim == entries_.end()) return false;
        ane_model* model = victim->model;
        entries_.erase(victim);
        try {
            model->unload();
        } catch (const error&) {
            // Its unload failed: it no longer counts as one of ours; the next compile or load says whether
            // the device has room.
        }
        ++unloaded_;
        return true;
    }

    mutable std::mutex mutex_;
    std::vector<entry> entries_;  // loaded programs; a few dozen at most
    std::uint64_t clock_ = 0;
    std::size_t unloaded_ = 0;
};

// Registers nothing itself: destroyed before the model it names (declared after it), it takes the model off
// the pool's list so no other program's load unloads a model being destroyed.
class loaded_program_ticket {
public:
    explicit loaded_program_ticket(const ane_model* model = nullptr) noexcept : model_(model) {}
    loaded_program_ticket(const loaded_program_ticket&) = delete;
    loaded_program_ticket& operator=(const loaded_program_ticket&) = delete;
    ~loaded_program_ticket() {
        if (model_ != nullptr) loaded_programs::instance().forget(*model_);
    }
    void set(const ane_model* model) noexcept { model_ = model; }

private:
    const ane_model* model_;
};

}  // namespace anvil::detail::ane
