#include "parallel/call_log.h"

namespace gf {
namespace {

// The live logs, a doubly linked list in creation order. Communicators are made and dropped on the
// thread that runs MPI (MPI_THREAD_FUNNELED), so the list needs no lock.
CallLog* g_head = nullptr;
CallLog* g_tail = nullptr;

}  // namespace

CallLog::CallLog() {
  prev_ = g_tail;
  if (g_tail) g_tail->next_ = this;
  else g_head = this;
  g_tail = this;
}

CallLog::~CallLog() {
  if (prev_) prev_->next_ = next_;
  else g_head = next_;
  if (next_) next_->prev_ = prev_;
  else g_tail = prev_;
}

const CallLog* CallLog::first() { return g_head; }

std::string describe_call(const CallRecord& r) {
  std::string s = std::string(r.op) + " #" + std::to_string(r.seq);
  if (r.peer >= 0) s += std::string(r.op[0] == 's' ? " to" : " from") + " rank " + std::to_string(r.peer);
  if (r.tag >= 0) s += std::string(" tag ") + std::to_string(r.tag);
  s += std::string(" (") + std::to_string(r.bytes) + " bytes) " + (r.done ? "done" : "not finished");
  return s;
}

}  // namespace gf
