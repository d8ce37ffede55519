// disc::rnn_layer / disc::rnn_layer_backward (rnn_layer_ops.cpp): a GRU or
// Elman layer over a whole sequence as one op each way.
#pragma once
#include <cstdint>

namespace disc {

enum RnnLayerMode : int64_t { kTanh = 0, kRelu = 1, kGru = 2 };

}  // namespace disc
