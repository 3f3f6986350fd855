// anvil: forward declarations, for headers that only name anvil's types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace anvil {

enum class dtype : std::uint8_t;
struct half;
struct bfloat16;
class error;
class thread_pool;
class mapped_file;
class dims;
template <std::int64_t... Extents>
struct shape;

namespace json {
class value;
class object;
}  // namespace json

namespace npy {
struct array;
}  // namespace npy

class host_tensor;
struct any_shape;
template <class T, class Shape>
class tensor;
enum class op : std::uint8_t;
struct attributes;
struct node;
struct graph_body;
class value;
class graph;
class program;
struct compile_options;

struct tensor_info;
class tensor_view;
class safetensors_file;
class safetensors_writer;
class checkpoint;

}  // namespace anvil
