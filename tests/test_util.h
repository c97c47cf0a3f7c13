// What the unit tests share beside their models (tests/tiny_model.h): fresh directories for the running test,
// the same way in every test file (named after the test: ctest runs this binary's tests as concurrent processes,
// and some of them again under other settings; emptied first), and the message of what a call throws.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <system_error>
#include <utility>

namespace gf::test {

// The running test's "Suite.Name", a parameterized test's '/' as '_'.
inline std::string test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}

// `dir` emptied (made when missing), returned.
inline std::filesystem::path fresh_dir(const std::filesystem::path& dir) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A fresh directory of the running test under the system's temporary directory, gf_TAG_PID_Suite.Name: the
// caller removes it (TempDir below does).
inline std::filesystem::path temp_test_dir(const std::string& tag) {
  return fresh_dir(std::filesystem::temp_directory_path() /
                   ("gf_" + tag + "_" + std::to_string(::getpid()) + "_" + test_name()));
}

// temp_test_dir(tag), removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) : path_(temp_test_dir(tag).string()) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return (std::filesystem::path(path_) / rel).string(); }

 private:
  std::string path_;
};

// A fixture whose every test gets a fresh directory dir_ (temp_test_dir(tag)), removed after it.
class TempDirTest : public ::testing::Test {
 protected:
  explicit TempDirTest(std::string tag) : tag_(std::move(tag)) {}
  void SetUp() override { dir_ = temp_test_dir(tag_); }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;

 private:
  std::string tag_;
};

// The message of the exception `f` throws, "(no exception)" when it returns.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace gf::test
