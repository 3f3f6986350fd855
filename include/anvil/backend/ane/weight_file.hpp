// anvil: one weight file of an ANE program — the blob bytes (MIL blob storage v2) and the path the MIL's
// BLOBFILE entries name it by. The lowering writes them, the framework bridge hands them to
// `_ANEInMemoryModelDescriptor` and writes them into the model's directory.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace anvil::detail::ane {

struct weight_file {
    std::string
        path;  // "@model_path/weights/weight.bin": the weights dictionary's key, as in BLOBFILE(path = ...)
    std::vector<std::byte> bytes;
};

}  // namespace anvil::detail::ane
