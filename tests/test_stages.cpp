// Stages (graph::begin_stage) and their packing into chunks of whole stages that fit one program's weights
// (graph/stages.hpp), the rule the Neural Engine partitioner and the decoder planner share: a greedy fill
// in order, a stage past the limit alone and split between its nodes, stages without weights never
// starting a chunk.
#include <doctest/doctest.h>
#include <anvil/anvil.hpp>

#include <string>
#include <vector>

namespace test_stages {

using anvil::dims;
using anvil::stage_chunk;
using anvil::stage_weights;

TEST_CASE("stages: begin_stage tags the nodes appended after it, and compile's body keeps the labels") {
    anvil::graph g;
    const auto x = g.input<float>("x", dims{2, 4});
    CHECK(g.begin_stage("first") == 1);
    const auto y = anvil::relu(x);
    CHECK(g.begin_stage("second") == 2);
    const auto z = y + y;
    CHECK(g[x.value().id()].stage == 0);
    CHECK(g[y.value().id()].stage == 1);
    CHECK(g[z.value().id()].stage == 2);
    const std::vector<anvil::value> outputs{z.value()};
    anvil::graph_body body = anvil::body_of(outputs, "test");
    CHECK(body.stage_labels == std::vector<std::string>{"", "first", "second"});

    // A node a pass appends without a stage counts as in its operands' latest stage; inputs keep their own.
    anvil::node late = body.nodes[z.value().id()];
    late.inputs = {z.value().id(), x.value().id()};
    late.stage = 0;
    body.nodes.push_back(late);
    const std::vector<std::uint32_t> stage = anvil::effective_stages(body);
    CHECK(stage.back() == 2);
    CHECK(stage[x.value().id()] == 0);
    CHECK(anvil::stage_range("layer 0", "layer 3") == "layer 0 to layer 3");
    CHECK(anvil::stage_range("head", "head") == "head");
}

TEST_CASE("stages: whole stages pack greedily into chunks within the weight limit") {
    // A new program before the piece that would pass the limit; a piece past it alone gets its own.
    CHECK(anvil::split_programs(std::vector<std::size_t>{60, 50}, 80) == 2);
    CHECK(anvil::split_programs(std::vector<std::size_t>{90}, 80) == 1);
    CHECK(anvil::split_programs(std::vector<std::size_t>{10, 90, 10}, 80) == 3);
    CHECK(anvil::split_programs(std::vector<std::size_t>{20, 20, 20, 20}, 80) == 1);

    const std::vector<stage_weights> stages{
        {0, {}},          // 0: no weights (an embedding gathered on the host): joins the first chunk
        {40, {40}},       // 1
        {30, {10, 20}},   // 2: 70 with stage 1
        {50, {50}},       // 3: 120 would pass 80, so a new chunk
        {0, {}},          // 4: joins chunk 1
        {110, {60, 50}},  // 5: past the limit alone: a chunk of its own, two programs
        {10, {10}},       // 6: never joins a split stage
        {70, {70}},       // 7: 80 with stage 6
    };
    const std::vector<stage_chunk> chunks = anvil::chunk_stages(stages, 80);
    REQUIRE(chunks.size() == 4);
    const auto is = [](const stage_chunk& c, std::size_t first, std::size_t last, std::size_t bytes,
                       std::size_t programs) {
        return c.first == first && c.last == last && c.weight_bytes == bytes && c.programs == programs;
    };
    CHECK(is(chunks[0], 0, 2, 70, 1));
    CHECK(is(chunks[1], 3, 4, 50, 1));
    CHECK(is(chunks[2], 5, 5, 110, 2));
    CHECK(is(chunks[3], 6, 7, 80, 1));
    // Everything fits one program: one chunk.
    const std::vector<stage_chunk> one = anvil::chunk_stages(stages, 1000);
    REQUIRE(one.size() == 1);
    CHECK(is(one[0], 0, 7, 310, 1));
}

}  // namespace test_stages
