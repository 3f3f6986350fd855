// How fast `anvil info` answers on a large checkpoint, and how little of it becomes resident.
//
// usage: bench_info PATH_TO_ANVIL [WORK_DIR] [GIB]
// Writes a GIB-sized (default 2) safetensors checkpoint shaped like a 1B-parameter bf16 model into WORK_DIR
// (default: the system temp folder), then runs, each in a child process with its own peak-RSS count:
//   - `anvil info FILE` with the file in the page cache (warm) and evicted from it (cold),
//   - the reference: reading the whole file once with read(2), as a loader that copies weights would.
// Prints wall times, peak resident memory, and the ratios info/reference and RSS/file size.
#include <anvil/anvil.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct measurement {
    double seconds;
    double peak_rss_mib;
};

// Runs `child` in a forked process, returning its wall time and peak resident set size.
template <class Child>
measurement measure(Child&& child) {
    const auto start = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) throw anvil::error("bench_info: fork failed");
    if (pid == 0) _exit(child());
    int status = 0;
    rusage usage{};
    if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        throw anvil::error("bench_info: the measured child process failed");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return {seconds, static_cast<double>(usage.ru_maxrss) / 1024.0};
}

void evict_from_page_cache(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw anvil::io_error("bench_info: cannot open " + path.string());
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

// A header like a 22-layer, 2048-wide bf16 decoder's, then `bytes` of data in tensor order. Written by hand
// rather than with safetensors_writer, which holds every tensor in memory: this streams 2 GB in 16 MB chunks.
std::uint64_t write_checkpoint(const std::filesystem::path& path, std::uint64_t target_bytes) {
    std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;
    const std::int64_t hidden = 2048, ffn = 5632, vocab = 32000;
    tensors.push_back({"model.embed_tokens.weight", {vocab, hidden}});
    std::uint64_t bytes = static_cast<std::uint64_t>(vocab * hidden * 2);
    for (int layer = 0; bytes < target_bytes; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + ".";
        for (const auto* name :
             {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}) {
            tensors.push_back({p + name + ".weight", {hidden, hidden}});
            bytes += static_cast<std::uint64_t>(hidden * hidden * 2);
        }
        for (const auto* name : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
            tensors.push_back({p + name + ".weight", {ffn, hidden}});
            bytes += static_cast<std::uint64_t>(ffn * hidden * 2);
        }
        tensors.push_back({p + "input_layernorm.weight", {hidden}});
        tensors.push_back({p + "post_attention_layernorm.weight", {hidden}});
        bytes += static_cast<std::uint64_t>(2 * hidden * 2);
    }
    anvil::json::object header;
    std::uint64_t offset = 0;
    for (const auto& [name, shape] : tensors) {
        std::uint64_t size = 2;
        for (const auto extent : shape)
            size *= static_cast<std::uint64_t>(extent);
        anvil::json::object entry;
        entry["dtype"] = anvil::json::value("BF16");
        anvil::json::array dims;
        for (const auto extent : shape)
            dims.emplace_back(extent);
        entry["shape"] = anvil::json::value(std::move(dims));
        entry["data_offsets"] = anvil::json::value(
            anvil::json::array{anvil::json::value(static_cast<std::int64_t>(offset)),
                               anvil::json::value(static_cast<std::int64_t>(offset + size))});
        header[name] = anvil::json::value(std::move(entry));
        offset += size;
    }
    std::string text = anvil::json::dump(anvil::json::value(std::move(header)));
    text.append((8 - text.size() % 8) % 8, ' ');
    std::FILE* out = std::fopen(path.c_str(), "wb");
    if (out == nullptr) throw anvil::io_error("bench_info: cannot create " + path.string());
    std::uint64_t length = text.size();
    std::fwrite(&length, 8, 1, out);
    std::fwrite(text.data(), 1, text.size(), out);
    std::vector<unsigned char> chunk(1 << 24);
    for (std::size_t i = 0; i < chunk.size(); ++i)
        chunk[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
    for (std::uint64_t written = 0; written < offset;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), offset - written));
        if (std::fwrite(chunk.data(), 1, n, out) != n) throw anvil::io_error("bench_info: write failed");
        written += n;
    }
    std::fclose(out);
    return offset;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_info PATH_TO_ANVIL [WORK_DIR] [GIB]\n");
        return 2;
    }
    try {
        const std::string anvil_binary = argv[1];
        const std::filesystem::path dir = argc > 2 ? argv[2] : std::filesystem::temp_directory_path();
        const double gib = argc > 3 ? std::stod(argv[3]) : 2.0;
        const auto path = dir / "anvil-bench-info.safetensors";
        write_checkpoint(path, static_cast<std::uint64_t>(gib * 1024 * 1024 * 1024));
        const double file_mib = static_cast<double>(std::filesystem::file_size(path)) / (1024.0 * 1024.0);

        const auto run_info = [&] {
            const int devnull = ::open("/dev/null", O_WRONLY);
            dup2(devnull, STDOUT_FILENO);
            execl(anvil_binary.c_str(), anvil_binary.c_str(), "info", path.c_str(),
                  static_cast<char*>(nullptr));
            return 127;
        };
        const auto read_all = [&] {
            const int fd = ::open(path.c_str(), O_RDONLY);
            std::vector<char> buffer(1 << 20);
            std::vector<char> copy;  // a loader that copies keeps what it read
            copy.reserve(static_cast<std::size_t>(std::filesystem::file_size(path)));
            for (ssize_t n; (n = ::read(fd, buffer.data(), buffer.size())) > 0;) {
                copy.insert(copy.end(), buffer.data(), buffer.data() + n);
            }
            return copy.empty() ? 1 : 0;
        };

        measure(read_all);  // warm the page cache
        const measurement info_warm = measure(run_info);
        const measurement read_warm = measure(read_all);
        evict_from_page_cache(path);
        const measurement info_cold = measure(run_info);
        evict_from_page_cache(path);
        const measurement read_cold = measure(read_all);
        std::filesystem::remove(path);

        std::printf("checkpoint: %.0f MiB\n", file_mib);
        std::printf("%-28s %10s %14s\n", "", "wall", "peak RSS");
        std::printf("%-28s %8.1f ms %10.1f MiB\n", "anvil info (warm cache)", info_warm.seconds * 1e3,
                    info_warm.peak_rss_mib);
        std::printf("%-28s %8.1f ms %10.1f MiB\n", "read whole file (warm)", read_warm.seconds * 1e3,
                    read_warm.peak_rss_mib);
        std::printf("%-28s %8.1f ms %10.1f MiB\n", "anvil info (cold cache)", info_cold.seconds * 1e3,
                    info_cold.peak_rss_mib);
        std::printf("%-28s %8.1f ms %10.1f MiB\n", "read whole file (cold)", read_cold.seconds * 1e3,
                    read_cold.peak_rss_mib);
        std::printf("ratio info/read time: warm %.4f, cold %.4f\n", info_warm.seconds / read_warm.seconds,
                    info_cold.seconds / read_cold.seconds);
        std::printf("ratio info peak RSS / file size: %.4f\n", info_cold.peak_rss_mib / file_mib);
        return 0;
    } catch (const anvil::error& e) {
        std::fprintf(stderr, "bench_info: %s\n", e.what());
        return 1;
    }
}
