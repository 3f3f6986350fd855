// anvil: compile's definitions (see compile.hpp; compilation.hpp says when this file is compiled).
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <utility>

#include "anvil/backend/ane/ane_program.hpp"
#include "anvil/backend/compile.hpp"
#include "anvil/backend/cpu/executor.hpp"
#include "anvil/backend/cpu/float64_program.hpp"

namespace anvil {

ANVIL_INLINE program compile(std::span<const value> outputs, const compile_options& options) {
    graph_body body = body_of(outputs, "compile");
    const auto made = [&](std::unique_ptr<detail::program_impl> impl) {
        program result(std::move(impl));
        if (options.placement_log) options.placement_log->add(result.placement());
        return result;
    };
    switch (options.target) {
        case device::cpu:
            return made(
                detail::cpu::make_cpu_program(compress_weights(body, options.weight_compression), options));
        case device::ane:
        case device::coreml:
            return made(std::make_unique<detail::ane::ane_program>(std::move(body), options));
        case device::automatic:
            if (detail::ane::available()) {
                return made(std::make_unique<detail::ane::ane_program>(std::move(body), options));
            }
            return made(
                detail::cpu::make_cpu_program(compress_weights(body, options.weight_compression), options));
    }
    throw error("compile: unknown device");
}

ANVIL_INLINE program compile(std::initializer_list<value> outputs, const compile_options& options) {
    return compile(std::span<const value>(outputs.begin(), outputs.size()), options);
}

}  // namespace anvil
