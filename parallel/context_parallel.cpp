#include "parallel/context_parallel.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gf {

namespace {

struct Segments {
  std::vector<int64_t> off, share;  // each segment's offset in a full row, and its per-rank slice
  int64_t full = 0, slice = 0;      // a full row's floats, and one rank's share of a row
};

Segments segments(const std::vector<int64_t>& widths, int parts) {
  Segments s;
  for (int64_t w : widths) {
    if (w % parts != 0)
      throw std::invalid_argument("context parallel: a row segment of " + std::to_string(w) +
                                  " floats does not split into " + std::to_string(parts) + " whole-head shares");
    s.off.push_back(s.full);
    s.share.push_back(w / parts);
    s.full += w;
    s.slice += w / parts;
  }
  return s;
}

}  // namespace

void ContextParallel::seq_to_heads(const float* local, float* heads, int64_t B, int64_t Tl,
                                   const std::vector<int64_t>& widths, float* send, float* recv) const {
  const int P = size();
  const Segments sg = segments(widths, P);
  const int64_t rows = B * Tl, w = sg.slice, n = static_cast<int64_t>(widths.size());
  // send [j][b][t][w]: rank j's heads of every local row.
#pragma omp parallel for collapse(2) schedule(static)
  for (int j = 0; j < P; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = send + (j * rows + r) * w;
      const float* src = local + r * sg.full;
      for (int64_t s = 0; s < n; ++s) {
        std::copy_n(src + sg.off[s] + j * sg.share[s], sg.share[s], dst);
        dst += sg.share[s];
      }
    }
  if (cp_) {
    const std::vector<int64_t> counts(static_cast<size_t>(P), rows);
    cp_->alltoallv_rows(send, counts.data(), recv, counts.data(), w);
  } else {
    std::copy_n(send, rows * w, recv);
  }
  // recv [i][b][t][w] -> heads [b][i Tl + t][w].
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < P; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / Tl, t = r % Tl;
      std::copy_n(recv + (i * rows + r) * w, w, heads + (b * Tl * P + i * Tl + t) * w);
    }
}

void ContextParallel::heads_to_seq(const float* heads, float* local, int64_t B, int64_t Tl,
                                   const std::vector<int64_t>& widths, float* send, float* recv) const {
  const int P = size();
  const Segments sg = segments(widths, P);
  const int64_t rows = B * Tl, w = sg.slice, n = static_cast<int64_t>(widths.size());
  // send [j][b][t][w]: the rows of rank j's chunk, this rank's heads.
#pragma omp parallel for collapse(2) schedule(static)
  for (int j = 0; j < P; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / Tl, t = r % Tl;
      std::copy_n(heads + (b * Tl * P + j * Tl + t) * w, w, send + (j * rows + r) * w);
    }
  if (cp_) {
    const std::vector<int64_t> counts(static_cast<size_t>(P), rows);
    cp_->alltoallv_rows(send, counts.data(), recv, counts.data(), w);
  } else {
    std::copy_n(send, rows * w, recv);
  }
  // recv [i][b][t][w]: rank i's heads of this rank's rows, each segment's slice back in its place.
#pragma omp parallel for collapse(2) schedule(static)
  for (int i = 0; i < P; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = recv + (i * rows + r) * w;
      float* dst = local + r * sg.full;
      for (int64_t s = 0; s < n; ++s) {
        std::copy_n(src, sg.share[s], dst + sg.off[s] + i * sg.share[s]);
        src += sg.share[s];
      }
    }
}

}  // namespace gf
