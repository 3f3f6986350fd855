// Audio input: the WAVE reader (every encoding it takes, the downmix, skipped and padded chunks, and the
// malformed corpus), the FFT of any length against the naive DFT, and Whisper's log-mel features against a
// numpy implementation of Hugging Face's WhisperFeatureExtractor.
//
// Where the expected values come from: tests/data/wav/ was written by tools/fixtures/make_wav_corpus.py
// from a formula (a 440 Hz tone, channel c at amplitude 0.5 / (c + 1)) restated here; fox_16k.wav's samples
// by Python's own wave module (quoted below); the log-mel fixtures by tools/fixtures/make_log_mel_fixtures.py
// (numpy's FFT, float64).
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>
#include <anvil/io/log_mel.hpp>
#include <anvil/io/wav.hpp>

#include "malformed_corpus.hpp"
#include "model_test_support.hpp"

#include <cmath>
#include <complex>
#include <cstdint>
#include <filesystem>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace test_audio {

namespace {

// The generator's tone, mixed down: the mean over the channels of 0.5 / (c + 1) * sin(2 pi 440 f / 16000).
double tone(std::size_t frame, std::int64_t channels) {
    double sum = 0.0;
    for (std::int64_t c = 0; c < channels; ++c)
        sum += 0.5 / static_cast<double>(c + 1) *
               std::sin(2.0 * std::numbers::pi * 440.0 * static_cast<double>(frame) / 16000.0);
    return sum / static_cast<double>(channels);
}

}  // namespace

TEST_CASE("wav: every encoding decodes to the tone it holds, mixed down to mono") {
    struct expectation {
        const char* file;
        std::int64_t channels;
        const char* encoding;
        std::size_t frames;
        double step;  // the encoding's quantisation step (for pcm32, a float sample's resolution near 0.5)
    };
    const expectation cases[] = {
        {"pcm16_mono.wav", 1, "pcm16", 64, 1.0 / 32767},
        {"pcm24_stereo.wav", 2, "pcm24", 64, 1.0 / 8388607},
        {"pcm32_mono.wav", 1, "pcm32", 64, 6e-8},
        {"pcm8_mono.wav", 1, "pcm8", 63, 1.0 / 127},
        {"float32_stereo.wav", 2, "float32", 64, 1e-7},
        {"float64_mono.wav", 1, "float64", 64, 1e-7},
        {"extensible_pcm24.wav", 2, "pcm24", 64, 1.0 / 8388607},
        {"list_before_data.wav", 1, "pcm16", 64, 1.0 / 32767},  // an odd-sized LIST chunk, padded, skipped
    };
    for (const expectation& e : cases) {
        const std::string file = e.file;
        CAPTURE(file);
        const anvil::audio a = anvil::read_wav(anvil_test::data_path(std::string("wav/") + e.file));
        CHECK(a.sample_rate == 16000);
        CHECK(a.channels == e.channels);
        CHECK(a.encoding == e.encoding);
        REQUIRE(a.samples.size() == e.frames);
        double worst = 0.0;
        for (std::size_t f = 0; f < e.frames; ++f)
            worst = std::max(worst, std::abs(a.samples[f] - tone(f, e.channels)));
        CHECK(worst <= e.step);  // PCM scaled by 2^(bits - 1) against the writer's 2^(bits - 1) - 1
    }
    // A real recording: Python's wave module reads fox_16k.wav's samples 1000 and 2000 as 282 and -2389.
    const anvil::audio fox = anvil::read_wav(anvil_test::data_path("audio/fox_16k.wav"));
    CHECK(fox.samples.size() == 55015);
    CHECK(fox.seconds() == doctest::Approx(3.4384375));
    CHECK(fox.samples[1000] == 282.0f / 32768.0f);
    CHECK(fox.samples[2000] == -2389.0f / 32768.0f);
}

TEST_CASE("wav: each malformed file fails with a message naming it and its defect") {
    check_malformed_corpus("wav", 20, [](const std::filesystem::path& path) { (void)anvil::read_wav(path); });
    CHECK_THROWS_AS((void)anvil::read_wav(anvil_test::data_path("wav/missing.wav")), anvil::io_error);
    // Every prefix of a valid file is refused cleanly or decodes (a prefix can end at a chunk boundary).
    const auto file = anvil::mapped_file::open(anvil_test::data_path("wav/float32_stereo.wav"));
    for (std::size_t n = 0; n < file.bytes().size(); ++n) {
        try {
            (void)anvil::decode_wav(file.bytes().first(n), "prefix");
        } catch (const anvil::format_error&) {
        }
    }
}

TEST_CASE("fft: every length equals the naive DFT") {
    std::mt19937 generator(7);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    // Powers of two, the mixed radices 2, 3, 4, 5 (400 is Whisper's), and primes through Bluestein.
    for (const std::size_t n : {1, 2, 3, 4, 5, 6, 8, 12, 30, 64, 100, 400, 7, 11, 97, 401, 1000, 2 * 401}) {
        CAPTURE(n);
        std::vector<std::complex<double>> x(n);
        for (auto& v : x)
            v = {uniform(generator), uniform(generator)};
        const anvil::fft_plan plan(n);
        std::vector<std::complex<double>> got(n);
        plan.forward(x, got);
        const std::vector<std::complex<double>> want = anvil::naive_dft(x);
        double worst = 0.0;
        for (std::size_t k = 0; k < n; ++k)
            worst = std::max(worst, std::abs(got[k] - want[k]));
        CHECK(worst < 1e-10 * static_cast<double>(n));
    }
    const anvil::fft_plan plan(8);
    std::vector<std::complex<double>> wrong(7), out(8);
    CHECK_THROWS_AS(plan.forward(wrong, out), anvil::error);
    CHECK_THROWS_AS(anvil::fft_plan(0), anvil::error);
}

TEST_CASE("log-mel: Whisper's features equal the numpy implementation of WhisperFeatureExtractor") {
    // The synthetic fox sentence, and real speech (jfk.wav, 11 s).
    for (const std::string clip : {"fox_16k", "jfk"})
        for (const std::int64_t bins : {80, 128}) {
            CAPTURE(clip);
            CAPTURE(bins);
            const anvil::audio speech = anvil::read_wav(anvil_test::data_path("audio/" + clip + ".wav"));
            anvil::log_mel_options options;
            options.mel_bins = bins;
            const anvil::host_tensor features = anvil::whisper_log_mel(speech.samples, options);
            REQUIRE(features.shape() == anvil::dims{bins, 3000});
            const anvil::host_tensor want = anvil_test::load_npy(
                anvil_test::data_path("audio/" + clip + "_log_mel" + std::to_string(bins) + ".npy"));
            const std::int64_t frames = want.shape()[1];
            const auto got = features.values<float>();
            const auto expected = want.values<float>();
            double worst = 0.0;
            for (std::int64_t m = 0; m < bins; ++m)
                for (std::int64_t t = 0; t < frames; ++t)
                    worst = std::max(
                        worst,
                        static_cast<double>(std::abs(got[static_cast<std::size_t>(m * 3000 + t)] -
                                                     expected[static_cast<std::size_t>(m * frames + t)])));
            MESSAGE(clip, ", ", bins, " mel bins: max abs difference from numpy ", worst, " over ", frames,
                    " frames");
            CHECK(worst < 1e-5);
            // Past the speech the window is silence: every value is the floor, max - 8 then (x + 4) / 4.
            const float floor = got[static_cast<std::size_t>(2999)];
            float ceiling = -1e30f;
            for (const float v : got)
                ceiling = std::max(ceiling, v);
            CHECK(floor == doctest::Approx(ceiling - 2.0f).epsilon(1e-6));
        }
    // Past 30 s the samples are cut: 31 s gives the features of its first 30.
    std::vector<float> long_clip(16000 * 31, 0.0f);
    std::vector<float> first(16000 * 30, 0.0f);
    for (std::size_t i = 0; i < long_clip.size(); ++i) {
        long_clip[i] = static_cast<float>(0.3 * std::sin(0.01 * static_cast<double>(i)) *
                                          std::sin(1e-4 * static_cast<double>(i)));
        if (i < first.size()) first[i] = long_clip[i];
    }
    CHECK(anvil::whisper_log_mel(long_clip).to_f32() == anvil::whisper_log_mel(first).to_f32());
    anvil::log_mel_options bad;
    bad.mel_bins = 0;
    CHECK_THROWS_AS((void)anvil::whisper_log_mel(first, bad), anvil::error);
    // The filter bank: Slaney-normalised triangles, each covering 2 / width Hz^-1 at its peak.
    const std::vector<double> filters = anvil::slaney_mel_filters();
    CHECK(filters.size() == 80 * 201);
    for (std::size_t m = 20; m < 80; ++m) {  // from 20 on each triangle spans several 40 Hz bins
        double area = 0.0;
        for (std::size_t b = 0; b < 201; ++b) {
            CHECK(filters[m * 201 + b] >= 0.0);
            area += filters[m * 201 + b] * 40.0;  // 40 Hz between bins
        }
        CHECK(area == doctest::Approx(1.0).epsilon(0.05));  // unit area, up to the 40 Hz sampling
    }
}

}  // namespace test_audio
