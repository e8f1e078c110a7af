// A spawned program with its stdout and stderr on pipes (Process), and
// cgacctd (CGACCTD_PATH) as one (Daemon), for the tests that run the real
// binaries.
#ifndef CGACCT_TESTS_SERVER_DAEMON_H_
#define CGACCT_TESTS_SERVER_DAEMON_H_

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cgacct {
namespace test_util {

// A spawned `binary` with `args`, its stdout and stderr on pipes; SIGKILLed
// on destruction if it has not been waited for.
class Process {
 public:
  Process(const char* binary, const std::vector<std::string>& flags) {
    int out[2];
    int err[2];
    EXPECT_EQ(pipe(out), 0);
    EXPECT_EQ(pipe(err), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, err[0]);
    std::vector<std::string> args = {binary};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(
        posix_spawn(&pid_, binary, &actions, nullptr, argv.data(), environ),
        0);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }

  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(out_);
    close(err_);
  }

  // The first stdout line, or "" after `timeout`.
  std::string ReadStdoutLine(std::chrono::milliseconds timeout) {
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{out_, POLLIN, 0};
      if (poll(&pfd, 1, 50) <= 0) continue;
      char c;
      if (read(out_, &c, 1) != 1) break;
      if (c == '\n') return line;
      line.push_back(c);
    }
    return line;
  }

  // All of stderr (call after the process exited).
  std::string ReadStderr() {
    std::string text;
    char buf[1024];
    ssize_t n;
    while ((n = read(err_, buf, sizeof(buf))) > 0) text.append(buf, n);
    return text;
  }

  // Exit status, or -1 if it did not exit within `timeout` (or died by a
  // signal).
  int WaitExit(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  void Signal(int sig) { kill(pid_, sig); }
  pid_t pid() const { return pid_; }

  // Reads both pipes to their end into *out and *err, then reaps the
  // process: its exit status, or -1 if it died by a signal or the pipes
  // were still open after `timeout` (it is then SIGKILLed).
  int WaitCollect(std::chrono::milliseconds timeout, std::string* out,
                  std::string* err) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    bool out_open = true;
    bool err_open = true;
    while ((out_open || err_open) &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd pfds[2] = {{out_open ? out_ : -1, POLLIN, 0},
                        {err_open ? err_ : -1, POLLIN, 0}};
      if (poll(pfds, 2, 50) <= 0) continue;
      char buf[4096];
      if (out_open && pfds[0].revents != 0) {
        const ssize_t n = read(out_, buf, sizeof(buf));
        if (n <= 0)
          out_open = false;
        else
          out->append(buf, n);
      }
      if (err_open && pfds[1].revents != 0) {
        const ssize_t n = read(err_, buf, sizeof(buf));
        if (n <= 0)
          err_open = false;
        else
          err->append(buf, n);
      }
    }
    int status = 0;
    if (out_open || err_open) kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    exited_ = true;
    return WIFEXITED(status) && !(out_open || err_open) ? WEXITSTATUS(status)
                                                        : -1;
  }

  // Waits for death by any cause (SIGKILL included); true if it died.
  bool WaitDeath(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  int err_ = -1;
  bool exited_ = false;
};

// The whole of file `path` ("" if it cannot be read).
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `command` with /bin/sh; its exit status (-1 if it did not exit).
inline int RunShell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A spawned cgacctd (CGACCTD_PATH) with `flags`.
class Daemon : public Process {
 public:
  explicit Daemon(const std::vector<std::string>& flags)
      : Process(CGACCTD_PATH, flags) {}
};

}  // namespace test_util
}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_DAEMON_H_
