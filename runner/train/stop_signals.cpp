#include "runner/train/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gf {

std::atomic<int> g_stop_signal{0};

namespace {

std::atomic<bool> g_routed{false};
std::atomic<bool> g_armed{false};

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// A forked child starts with the mask of the thread that forked: give it the signals back.
void unblock_in_child() {
  const sigset_t s = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
}

void* take_signals(void*) {
  const sigset_t s = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&s, &sig) != 0) continue;
    if (!g_armed.load()) {
      // The default action: the process ends by this signal, as it would have without us.
      std::signal(sig, SIG_DFL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      raise(sig);
      _exit(128 + sig);  // not reached: SIGINT's and SIGTERM's default action ends the process
    }
    int expected = 0;
    if (!g_stop_signal.compare_exchange_strong(expected, sig)) {  // the second one: at once, and said
      static const char kSecond[] =
          "gridformer: a second stop signal: stopping at once (a checkpoint under way is left unfinished; the last "
          "committed one stands)\n";
      const ssize_t written = write(STDERR_FILENO, kSecond, sizeof kSecond - 1);
      (void)written;
      _exit(128 + sig);
    }
  }
  return nullptr;
}

}  // namespace

void route_stop_signals() {
  if (g_routed.exchange(true)) return;
  const sigset_t s = stop_set();
  if (const int e = pthread_sigmask(SIG_BLOCK, &s, nullptr); e != 0)
    throw std::runtime_error(std::string("pthread_sigmask: ") + std::strerror(e));
  pthread_atfork(nullptr, nullptr, unblock_in_child);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  const int e = pthread_create(&t, &attr, take_signals, nullptr);
  pthread_attr_destroy(&attr);
  if (e != 0) throw std::runtime_error(std::string("cannot start the signal thread: ") + std::strerror(e));
}

void install_stop_handlers() {
  // Arming without the routing would leave the signals' default action on every thread.
  if (!g_routed.load()) throw std::logic_error("install_stop_handlers() before route_stop_signals()");
  g_armed.store(true);
}

}  // namespace gf
