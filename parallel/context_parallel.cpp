#include "parallel/context_parallel.h"

#include "core/math/parallel_worth.h"
#include "core/trace/trace.h"

#include <cstdlib>

#include <algorithm>
#include <limits>
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

ContextParallel::ContextParallel(const Communicator* cp, const Communicator* ulysses, const Communicator* ring) {
  if (cp == nullptr || cp->size() <= 1) return;
  if ((ulysses == nullptr && ring == nullptr) ||
      (ulysses != nullptr && ring != nullptr && ulysses->size() * ring->size() != cp->size()) ||
      (ring == nullptr && ulysses->size() != cp->size()) || (ulysses == nullptr && ring->size() != cp->size()))
    throw std::invalid_argument("context parallel: the Ulysses and ring groups do not make up the context group of " +
                                std::to_string(cp->size()));
  cp_ = cp;
  uly_ = ulysses != nullptr && ulysses->size() > 1 ? ulysses : nullptr;
  ring_ = ring != nullptr && ring->size() > 1 ? ring : nullptr;
}

void ContextParallel::exchange(const float* send, float* recv, int64_t rows, int64_t w) const {
  if (!uly_) {
    std::copy_n(send, rows * w, recv);
    return;
  }
  const std::vector<int64_t> counts(static_cast<size_t>(uly_->size()), rows);
  uly_->alltoallv_rows(send, counts.data(), recv, counts.data(), w);
}

int64_t ContextParallel::gathered_row(int i, int64_t t, int64_t Tl) const {
  const int64_t pieces = ring() ? 2 : 1, L = Tl / pieces;
  return t / L * (ulysses_size() * L) + i * L + t % L;
}

void ContextParallel::seq_to_heads(const float* local, float* heads, int64_t B, int64_t Tl,
                                   const std::vector<int64_t>& widths, float* send, float* recv) const {
  const int P = ulysses_size();
  const Segments sg = segments(widths, P);
  const int64_t rows = B * Tl, w = sg.slice, n = static_cast<int64_t>(widths.size());
  // send [j][b][t][w]: rank j's heads of every local row.
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(P * rows * w))
  for (int j = 0; j < P; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      float* dst = send + (j * rows + r) * w;
      const float* src = local + r * sg.full;
      for (int64_t s = 0; s < n; ++s) {
        std::copy_n(src + sg.off[s] + j * sg.share[s], sg.share[s], dst);
        dst += sg.share[s];
      }
    }
  exchange(send, recv, rows, w);
  // recv [i][b][t][w] -> heads [b][gathered_row(i, t)][w].
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(P * rows * w))
  for (int i = 0; i < P; ++i)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / Tl, t = r % Tl;
      std::copy_n(recv + (i * rows + r) * w, w, heads + (b * Tl * P + gathered_row(i, t, Tl)) * w);
    }
}

void ContextParallel::heads_to_seq(const float* heads, float* local, int64_t B, int64_t Tl,
                                   const std::vector<int64_t>& widths, float* send, float* recv) const {
  const int P = ulysses_size();
  const Segments sg = segments(widths, P);
  const int64_t rows = B * Tl, w = sg.slice, n = static_cast<int64_t>(widths.size());
  // send [j][b][t][w]: the rows of rank j's chunk, this rank's heads.
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(P * rows * w))
  for (int j = 0; j < P; ++j)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = r / Tl, t = r % Tl;
      std::copy_n(heads + (b * Tl * P + gathered_row(j, t, Tl)) * w, w, send + (j * rows + r) * w);
    }
  exchange(send, recv, rows, w);
  // recv [i][b][t][w]: rank i's heads of this rank's rows, each segment's slice back in its place.
#pragma omp parallel for collapse(2) schedule(static) if (parallel_worth(P * rows * w))
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

ops::RowChunks ContextParallel::rows_of(int c, int64_t rows) const {
  ops::RowChunks r;
  if (!ring()) {
    r.chunk = rows;
    r.start[0] = c * rows;
    return r;
  }
  // Piece u (of U) of ring rank q's two chunks of U rows / 2 each (colossalai_cp: U = 1, q = c).
  const int U = ulysses_size(), q = c / U, u = c % U;
  r.chunk = rows / 2;
  r.chunks = 2;
  const int64_t whole = U * r.chunk;  // one ring chunk
  r.start[0] = q * whole + u * r.chunk;
  r.start[1] = (2 * (size() / U) - 1 - q) * whole + u * r.chunk;
  return r;
}

ops::RowChunks ContextParallel::ring_rows_of(int q, int64_t rows) const {
  ops::RowChunks r;
  r.chunk = rows / 2;
  r.chunks = 2;
  r.start[0] = q * r.chunk;
  r.start[1] = (2 * ring_->size() - 1 - q) * r.chunk;
  return r;
}

namespace {

// GF_RING_SERIAL set: each block's transfer is waited for before its products start, so nothing
// overlaps (bench/context_parallel.py measures the overlap against it; the numbers are the same).
bool ring_serial() {
  static const bool serial = std::getenv("GF_RING_SERIAL") != nullptr;
  return serial;
}

// The requests in flight during a block's products, tested between its tiles (RingShape::progress):
// Open MPI moves a message through shared memory only inside MPI calls of both ranks.
struct InFlight {
  Request* r[4] = {nullptr, nullptr, nullptr, nullptr};
  static void poll(void* arg) {
    for (Request* q : static_cast<InFlight*>(arg)->r)
      if (q != nullptr) q->test();
  }
};

// `s` with the progress hook on `f` (none under GF_RING_SERIAL: nothing is in flight then).
ops::RingShape polling(const ops::RingShape& s, InFlight& f) {
  ops::RingShape p = s;
  if (!ring_serial()) {
    p.progress = &InFlight::poll;
    p.progress_arg = &f;
  }
  return p;
}

// The key|value columns of q|k|v rows (keys then values, adjacent) into a block [rows, 2 Hkv D].
void pack_kv(float* kv, const float* qkv, int64_t rows, int64_t W, int64_t q_width, int64_t kv_width) {
#pragma omp parallel for schedule(static) if (parallel_worth(rows * kv_width))
  for (int64_t r = 0; r < rows; ++r) std::copy_n(qkv + r * W + q_width, kv_width, kv + r * kv_width);
}

}  // namespace

void ContextParallel::ring_fwd(const float* qkv, int64_t W, float* y, float* lse, const ops::RingShape& s,
                               const ops::DropoutKey& drop, const RingScratch& sc) const {
  const int P = ring_->size(), me = ring_->rank(), next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t D = s.head_dim, rows = s.batch * s.rows, qw = s.heads * D, kvw = 2 * s.kv_heads * D;
  const int64_t stats = s.batch * s.heads * s.rows;
  pack_kv(sc.kv[0], qkv, rows, W, qw, kvw);
  std::fill(y, y + rows * qw, 0.0f);
  std::fill(sc.m, sc.m + stats, -std::numeric_limits<float>::infinity());
  std::fill(lse, lse + stats, 0.0f);
  const ops::RowChunks mine = ring_rows_of(me, s.rows);
  int cur = 0;
  for (int step = 0; step < P; ++step) {
    // The block of rank `owner` is here; the next one is already on its way.
    const int owner = (me - step + P) % P;
    Request rr, rs;
    if (step + 1 < P) {
      rr = ring_->irecv(sc.kv[1 - cur], rows * kvw, prev, step);
      rs = ring_->isend(sc.kv[cur], rows * kvw, next, step);
    }
    if (ring_serial()) {
      trace::Span w("wait", "ring transfer");
      rs.wait();
      rr.wait();
    }
    {
      trace::Span c("compute", "ring block fwd");
      InFlight f{{&rr, &rs, nullptr, nullptr}};
      ops::ring_attention_fwd_block(y, sc.m, lse, qkv, W, sc.kv[cur], sc.kv[cur] + kvw / 2, kvw, mine,
                                    ring_rows_of(owner, s.rows), polling(s, f), drop);
    }
    {  // what of the transfer the products did not hide
      trace::Span w("wait", "ring wait");
      rs.wait();
      rr.wait();
    }
    cur = 1 - cur;
  }
  ops::ring_attention_fwd_finish(y, lse, sc.m, s);
}

void ContextParallel::ring_bwd(float* dqkv, const float* dy, const float* qkv, int64_t W, const float* y, const float* lse,
                               const ops::RingShape& s, const ops::DropoutKey& drop, const RingScratch& sc) const {
  const int P = ring_->size(), me = ring_->rank(), next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t D = s.head_dim, rows = s.batch * s.rows, qw = s.heads * D, kvw = 2 * s.kv_heads * D, n = rows * kvw;
  ops::ring_attention_bwd_prepare(sc.di, dy, y, s);
  pack_kv(sc.kv[0], qkv, rows, W, qw, kvw);
  const ops::RowChunks mine = ring_rows_of(me, s.rows);
  // A block's key/value gradient is summed along the ring in visiting order (its owner's share first):
  // at step `step` this rank computes its share of the block of rank `owner` into dkv[cur] while the
  // previous visitors' sum arrives in dkv_in, adds it, and sends the sum on (waited for two steps
  // later, before dkv[cur] is reused).
  Request gs[2];
  int cur = 0;
  for (int step = 0; step < P; ++step) {
    const int owner = (me - step + P) % P;
    Request rr, rs, gr;
    if (step + 1 < P) {  // the keys and values travel ahead
      rr = ring_->irecv(sc.kv[1 - cur], n, prev, step);
      rs = ring_->isend(sc.kv[cur], n, next, step);
    }
    if (step > 0) gr = ring_->irecv(sc.dkv_in, n, prev, P + step - 1);
    if (ring_serial()) {
      trace::Span w("wait", "ring transfer");
      gr.wait();
      rs.wait();
      rr.wait();
    }
    {
      trace::Span w("wait", "ring wait");
      gs[cur].wait();
    }
    std::fill(sc.dkv[cur], sc.dkv[cur] + n, 0.0f);
    {
      trace::Span c("compute", "ring block bwd");
      InFlight f{{&rr, &rs, &gr, &gs[1 - cur]}};
      ops::ring_attention_bwd_block(dqkv, W, sc.dkv[cur], sc.dkv[cur] + kvw / 2, kvw, qkv, W, sc.kv[cur],
                                    sc.kv[cur] + kvw / 2, kvw, dy, lse, sc.di, mine, ring_rows_of(owner, s.rows),
                                    polling(s, f), drop);
    }
    {  // what of the transfers the products did not hide
      trace::Span w("wait", "ring wait");
      gr.wait();
      rs.wait();
      rr.wait();
    }
    if (step > 0) {
      float* g = sc.dkv[cur];
      const float* in = sc.dkv_in;
#pragma omp parallel for schedule(static) if (parallel_worth(n))
      for (int64_t i = 0; i < n; ++i) g[i] = in[i] + g[i];
    }
    // The sum goes to the block's next visitor (after the last step: its owner, the next rank).
    gs[cur] = ring_->isend(sc.dkv[cur], n, next, P + step);
    cur = 1 - cur;
  }
  {  // this rank's own block, every visitor's share summed
    trace::Span w("wait", "ring wait");
    Request gr = ring_->irecv(sc.dkv_in, n, prev, 2 * P - 1);
    gr.wait();
    gs[0].wait();
    gs[1].wait();
  }
#pragma omp parallel for schedule(static) if (parallel_worth(n))
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = sc.dkv_in + r * kvw;
    float* d = dqkv + r * W + qw;
    for (int64_t i = 0; i < kvw; ++i) d[i] += g[i];
  }
}

}  // namespace gf
