// anvil: the Neural Engine's public face — compile for device::ane, the capability record each chip and OS
// gets (capabilities.hpp), the on-disk program cache and what a user sees of it (backend/cache.hpp), and
// `anvil selftest`'s probes (selftest.hpp).
#pragma once

#include "anvil/cpu.hpp"

#include "anvil/backend/ane/capabilities.hpp"
#include "anvil/backend/ane/program_cache.hpp"
#include "anvil/backend/ane/selftest.hpp"
#include "anvil/backend/cache.hpp"
#include "anvil/backend/coreml/export.hpp"
