// Trains a small CNN from scratch on the UCI handwritten digits (8x8 images, 1,797 of them): conv blocks
// (conv, GroupNorm built from differentiable primitives, ReLU) with max pooling, the spatial mean and a
// linear head, trained with AdamW and a cosine schedule, and reports the accuracy on a held-out fifth.
//
//   train_digits DIGITS.csv [--backend cpu|ane] [--epochs N] [--min-accuracy A]
//
// DIGITS.csv: scikit-learn's digits.csv (tests/data/digits/): 64 pixels (0..16) and the digit per line.
// Every fifth image (index % 5 == 4) is held out. --min-accuracy makes the program fail below A (CI runs it).
#include <anvil/anvil.hpp>
#include <anvil/train.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct digits {
    std::vector<float> pixels;  // [N, 1, 8, 8], scaled to [0, 1]
    std::vector<std::int64_t> labels;
};

digits read_digits(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    digits all;
    std::string line;
    std::size_t number = 0;
    while (std::getline(in, line)) {
        ++number;
        std::stringstream fields(line);
        std::string field;
        std::vector<int> values;
        while (std::getline(fields, field, ','))
            values.push_back(std::stoi(field));
        if (values.size() != 65 || values[64] < 0 || values[64] > 9) {
            throw std::runtime_error(path + ":" + std::to_string(number) +
                                     ": expected 64 pixels and a digit");
        }
        for (int i = 0; i < 64; ++i)
            all.pixels.push_back(static_cast<float>(values[static_cast<std::size_t>(i)]) / 16.0f);
        all.labels.push_back(values[64]);
    }
    return all;
}

// The rows `chosen` of the data as one batch: pixels [B, 1, 8, 8] and labels [B].
std::vector<anvil::named_tensor> batch_of(const digits& data, std::span<const std::size_t> chosen) {
    std::vector<float> pixels;
    std::vector<std::int64_t> labels;
    for (const std::size_t row : chosen) {
        pixels.insert(pixels.end(), data.pixels.begin() + static_cast<std::ptrdiff_t>(row * 64),
                      data.pixels.begin() + static_cast<std::ptrdiff_t>((row + 1) * 64));
        labels.push_back(data.labels[row]);
    }
    const auto count = static_cast<std::int64_t>(chosen.size());
    return {{"pixels", anvil::host_tensor::from(pixels, anvil::dims{count, 1, 8, 8})},
            {"labels", anvil::host_tensor::from(labels, anvil::dims{count})}};
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc < 2) {
        std::cerr << "usage: train_digits DIGITS.csv [--backend cpu|ane] [--epochs N] [--min-accuracy A]\n";
        return 2;
    }
    std::string backend = "cpu";
    int epochs = 8;
    double min_accuracy = 0.0;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string_view option = argv[i];
        if (option == "--backend")
            backend = argv[i + 1];
        else if (option == "--epochs")
            epochs = std::stoi(argv[i + 1]);
        else if (option == "--min-accuracy")
            min_accuracy = std::stod(argv[i + 1]);
        else
            throw std::runtime_error("unknown option " + std::string(option));
    }
    const digits data = read_digits(argv[1]);
    std::vector<std::size_t> train, held_out;
    for (std::size_t i = 0; i < data.labels.size(); ++i)
        (i % 5 == 4 ? held_out : train).push_back(i);

    // The model, built once per batch shape (a short last batch gets its own program).
    anvil::train::parameter_set params(/*seed=*/1);
    const std::array<std::int64_t, 2> widths{16, 32};
    auto build = [&](std::span<const anvil::io_info> batch) {
        anvil::graph g;
        const auto pixels = g.input("pixels", anvil::dtype::f32, batch[0].shape);
        const auto labels = g.input("labels", anvil::dtype::i64, batch[1].shape);
        const auto logits = anvil::train::cifar_cnn(g, params, pixels, widths, 10);
        return anvil::train::training_graph{g, anvil::train::cross_entropy(logits, labels), {logits}};
    };
    (void)build(
        std::vector<anvil::io_info>{{"pixels", anvil::dtype::f32, anvil::dims{1, 1, 8, 8}},
                                    {"labels", anvil::dtype::i64, anvil::dims{1}}});  // declares the weights

    const std::size_t batch_size = 32;
    const auto steps_per_epoch = static_cast<std::int64_t>((train.size() + batch_size - 1) / batch_size);
    anvil::train::adamw optimizer(params.parameters(),
                                  {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01});
    anvil::train::trainer_options options;
    options.compile.target = backend == "ane" ? anvil::device::ane : anvil::device::cpu;
    options.compile.placement_log = std::make_shared<anvil::placement_journal>();
    anvil::train::trainer trainer(params, build, optimizer,
                                  anvil::train::lr_schedule("cosine", 3e-3, 20, steps_per_epoch * epochs),
                                  options);

    anvil::train::uniform_generator shuffle(7);
    for (int epoch = 0; epoch < epochs; ++epoch) {
        // Fisher-Yates with the platform-independent generator.
        for (std::size_t i = train.size(); i > 1; --i) {
            const auto j = static_cast<std::size_t>(shuffle.next(0.0f, static_cast<float>(i)));
            std::swap(train[i - 1], train[std::min(j, i - 1)]);
        }
        double loss = 0.0;
        for (std::size_t first = 0; first < train.size(); first += batch_size) {
            const std::span<const std::size_t> rows(train.data() + first,
                                                    std::min(batch_size, train.size() - first));
            loss += trainer.step(batch_of(data, rows)).loss;
        }
        std::cout << "epoch " << epoch + 1 << ": mean loss " << loss / static_cast<double>(steps_per_epoch)
                  << "\n";
    }

    std::size_t correct = 0;
    for (std::size_t first = 0; first < held_out.size(); first += batch_size) {
        const std::span<const std::size_t> rows(held_out.data() + first,
                                                std::min(batch_size, held_out.size() - first));
        const anvil::host_tensor logits = trainer.evaluate(batch_of(data, rows)).outputs[0];
        const std::vector<float> values = logits.to_f32();
        for (std::size_t r = 0; r < rows.size(); ++r) {
            const auto begin = values.begin() + static_cast<std::ptrdiff_t>(r * 10);
            const auto predicted = std::max_element(begin, begin + 10) - begin;
            if (predicted == data.labels[rows[r]]) ++correct;
        }
    }
    const double accuracy = static_cast<double>(correct) / static_cast<double>(held_out.size());
    std::cout << "held-out accuracy: " << accuracy << " (" << correct << " of " << held_out.size() << ", "
              << trainer.programs_compiled() << " programs compiled, backend " << backend << ")\n";
    // Where each program ran: every segment's device, and why a segment stayed on the CPU.
    for (const anvil::placement_report& report : options.compile.placement_log->reports()) {
        std::size_t on_ane = 0;
        for (const anvil::placement_segment& segment : report.segments)
            on_ane += segment.device == "ane" ? segment.op_count : 0;
        std::cout << "program on " << report.backend << ": " << on_ane << " ops on the Neural Engine, "
                  << report.host_nodes.size() << " on the host, " << report.refused()
                  << " segments refused\n";
        for (std::size_t i = 0; i < std::min<std::size_t>(3, report.host_nodes.size()); ++i)
            std::cout << "  host: " << report.host_nodes[i] << "\n";
    }
    if (accuracy < min_accuracy) {
        std::cerr << "train_digits: accuracy " << accuracy << " is below " << min_accuracy << "\n";
        return 1;
    }
    return 0;
} catch (const std::exception& e) {
    std::cerr << "train_digits: " << e.what() << "\n";
    return 1;
}
