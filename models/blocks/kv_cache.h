// What generation keeps per layer (models/generator.h) and where each row of a cached forward belongs.
#pragma once
#include <cstdint>

namespace gf {

// The keys and values of one layer for generation: per sequence slot, per local key/value head, `capacity`
// positions of head_dim floats ([slots, Hkvl, capacity, D] each). Multi-head latent attention keeps its latent
// instead (MlaProjection::cached_floats_per_position per position in k, [slots, capacity, kv_rank + rope]; v null).
// `scores`: scratch of `capacity` floats per OpenMP thread.
struct KvCache {
  float *k = nullptr, *v = nullptr;
  int64_t capacity = 0;   // positions stored per slot; position p is stored at p % capacity
  int64_t positions = 0;  // positions a sequence may reach (0: capacity). A sliding window's cache rolls:
                          // it stores window + rows per call - 1 positions, fewer than it may reach
  float* scores = nullptr;
};

// Where each row of a cached forward belongs: its sequence slot and its position in that sequence.
struct RowPositions {
  const int64_t* seq = nullptr;
  const int64_t* pos = nullptr;
};

}  // namespace gf
