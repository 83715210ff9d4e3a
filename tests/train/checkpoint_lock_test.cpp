// A job owns its checkpoint directory (train/checkpoint/checkpoint_lock.h): a second owner is refused with one line
// naming the holder; the lock goes with its holder however the holder ends, kill -9 included; a process
// below the holder (a supervisor's child, an MPI rank under herd launch) goes on under its ownership.
#include "herd/train/checkpoint/checkpoint_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace herd::train {
namespace {

namespace fs = std::filesystem;

class CheckpointLock : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("herd_ckpt_lock_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return (dir_ / "run").string(); }
  fs::path dir_;
};

std::string host() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

TEST_F(CheckpointLock, ASecondOwnerIsRefusedNamingTheHolderUntilTheFirstLetsGo) {
  {
    Result<CheckpointDirLock> first = CheckpointDirLock::acquire(dir(), "herd train");
    ASSERT_TRUE(first.ok()) << first.error().message();
    EXPECT_TRUE(first->held());
    EXPECT_TRUE(fs::exists(fs::path(dir()) / CheckpointDirLock::kFileName));
    Result<CheckpointDirLock> second = CheckpointDirLock::acquire(dir(), "herd train");
    ASSERT_FALSE(second.ok());
    const std::string m = second.error().message();
    EXPECT_EQ(m.find("checkpoint.dir '" + dir() + "' is in use by herd train pid " + std::to_string(::getpid()) +
                     " on host " + host() + " since 20"),
              0u)
        << m;
    EXPECT_NE(m.find("Z; stop that job or choose another checkpoint.dir"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  Result<CheckpointDirLock> again = CheckpointDirLock::acquire(dir(), "herd launch");
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_TRUE(again->held());
}

TEST_F(CheckpointLock, AHolderKilledByKill9LeavesTheDirectoryFree) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<CheckpointDirLock> lock = CheckpointDirLock::acquire(dir(), "herd train");
    const char c = lock.ok() ? 'y' : 'n';
    if (::write(ready[1], &c, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  Result<CheckpointDirLock> refused = CheckpointDirLock::acquire(dir(), "herd train");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find("pid " + std::to_string(pid) + " "), std::string::npos)
      << refused.error().message();
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  Result<CheckpointDirLock> taken = CheckpointDirLock::acquire(dir(), "herd train");
  ASSERT_TRUE(taken.ok()) << taken.error().message();
  EXPECT_TRUE(taken->held());
}

// The supervisor holds the lock; its child (a process that descends from it) trains under it.
TEST_F(CheckpointLock, AProcessBelowTheHolderGoesOnUnderItsOwnership) {
  Result<CheckpointDirLock> mine = CheckpointDirLock::acquire(dir(), "herd train");
  ASSERT_TRUE(mine.ok()) << mine.error().message();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    Result<CheckpointDirLock> child = CheckpointDirLock::acquire(dir(), "herd train");
    ::_exit(!child.ok() ? 1 : child->held() ? 2 : 0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "1: refused, 2: took a second lock";
  // The holder still holds it: an unrelated job is refused.
  EXPECT_FALSE(CheckpointDirLock::acquire(dir(), "herd train").ok());
}

}  // namespace
}  // namespace herd::train
