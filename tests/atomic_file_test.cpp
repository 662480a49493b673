// AtomicFile (common/base/atomic_file.h): the contents land whole or not at all,
// concurrent writers never share a temporary, special targets are refused
// without being opened, symlinks are followed, permissions kept, and no
// temporary is left behind on any path.
#include "common/base/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/format/gguf.h"
#include "tests/temp_path.h"

namespace pi {
namespace {

using ::testing::HasSubstr;

// A fresh, empty directory for one test.
std::string MakeDir(const std::string& name) {
  const std::string dir = TempPath(name);
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  closedir(d);
  return out;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status WriteText(const std::string& path, const std::string& text) {
  return WriteFileAtomically(path,
                             [&](AtomicFile* f) { return f->Write(text.data(), text.size()); });
}

TEST(AtomicFile, WritesAndReplacesLeavingNoTemporary) {
  const std::string dir = MakeDir("write");
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteText(path, "first").ok());
  EXPECT_EQ(Slurp(path), "first");
  // Larger than the 1 MiB buffer, in pieces.
  std::string big(3 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(WriteFileAtomically(path, [&](AtomicFile* f) {
                for (size_t i = 0; i < big.size(); i += 700000) {
                  PI_RETURN_IF_ERROR(
                      f->Write(big.data() + i, std::min<size_t>(700000, big.size() - i)));
                }
                return Status::Ok();
              }).ok());
  EXPECT_EQ(Slurp(path), big);
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("out.bin"));
}

TEST(AtomicFile, AFailureLeavesTheTargetAsItWas) {
  const std::string dir = MakeDir("fail");
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteText(path, "old contents").ok());
  const Status s = WriteFileAtomically(path, [](AtomicFile* f) {
    PI_RETURN_IF_ERROR(f->Write("half", 4));
    return Status::Error("the producer failed");
  });
  EXPECT_THAT(s.message(), HasSubstr("the producer failed"));
  EXPECT_EQ(Slurp(path), "old contents");
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("out.bin"));
  // A destructor without Commit abandons the temporary too.
  {
    AtomicFile f;
    ASSERT_TRUE(f.Open(path).ok());
    ASSERT_TRUE(f.Write("never", 5).ok());
  }
  EXPECT_EQ(Slurp(path), "old contents");
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("out.bin"));
  // A directory that does not exist: an error naming the path.
  EXPECT_THAT(WriteText(dir + "/no/such/dir/x", "y").message(), HasSubstr("no/such/dir"));
}

TEST(AtomicFile, RefusesSpecialTargetsWithoutOpeningThem) {
  const std::string dir = MakeDir("special");
  // A directory.
  const std::string sub = dir + "/sub";
  mkdir(sub.c_str(), 0755);
  EXPECT_THAT(WriteText(sub, "x").message(), HasSubstr("is a directory"));
  // A FIFO: refused at once (opening it for writing would block).
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(WriteText(fifo, "x").message(), HasSubstr("is a FIFO"));
  // A character device.
  EXPECT_THAT(WriteText("/dev/null", "x").message(), HasSubstr("character device"));
  struct stat st;
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  // A socket.
  const std::string sock = dir + "/sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (sock.size() < sizeof(addr.sun_path)) {
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_THAT(WriteText(sock, "x").message(), HasSubstr("is a socket"));
  }
  close(fd);
  EXPECT_THAT(WriteText("", "x").message(), HasSubstr("empty name"));
  // Nothing was left beside them.
  for (const std::string& e : Entries(dir)) EXPECT_EQ(e.find(".tmp"), std::string::npos) << e;
}

TEST(AtomicFile, FollowsSymlinksAndKeepsPermissions) {
  const std::string dir = MakeDir("link");
  const std::string real = dir + "/real.bin", link = dir + "/link.bin";
  ASSERT_TRUE(WriteText(real, "old").ok());
  ASSERT_EQ(chmod(real.c_str(), 0640), 0);
  ASSERT_EQ(symlink("real.bin", link.c_str()), 0);
  ASSERT_TRUE(WriteText(link, "new").ok());
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself was replaced";
  EXPECT_EQ(Slurp(real), "new");
  ASSERT_EQ(stat(real.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // A new file: 0666 less the umask.
  const mode_t mask = umask(022);
  ASSERT_TRUE(WriteText(dir + "/fresh.bin", "x").ok());
  umask(mask);
  ASSERT_EQ(stat((dir + "/fresh.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // A dangling link: an error, nothing created.
  const std::string dangling = dir + "/dangling.bin";
  ASSERT_EQ(symlink("missing/target.bin", dangling.c_str()), 0);
  EXPECT_FALSE(WriteText(dangling, "x").ok());
}

// Eight writers at once, several times: threads and processes. Every write
// succeeds, the file is always one writer's whole contents, and no
// temporary is left.
TEST(AtomicFile, ConcurrentWritersNeverCollide) {
  const std::string dir = MakeDir("concurrent");
  const std::string path = dir + "/shared.bin";
  auto contents = [](int w) { return std::string(200000 + 1000 * w, static_cast<char>('A' + w)); };
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> threads;
    std::vector<int> ok(8, 0);
    for (int w = 0; w < 8; ++w) {
      threads.emplace_back([&, w] { ok[w] = WriteText(path, contents(w)).ok(); });
    }
    for (std::thread& t : threads) t.join();
    for (int w = 0; w < 8; ++w) EXPECT_TRUE(ok[w]) << "writer " << w;
    const std::string got = Slurp(path);
    bool whole = false;
    for (int w = 0; w < 8; ++w) whole = whole || got == contents(w);
    EXPECT_TRUE(whole) << "round " << round << ": " << got.size() << " bytes of a mix";
    EXPECT_THAT(Entries(dir), ::testing::ElementsAre("shared.bin"));
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<pid_t> pids;
    for (int w = 0; w < 8; ++w) {
      const pid_t pid = fork();
      if (pid == 0) _exit(WriteText(path, contents(w)).ok() ? 0 : 1);
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    const std::string got = Slurp(path);
    bool whole = false;
    for (int w = 0; w < 8; ++w) whole = whole || got == contents(w);
    EXPECT_TRUE(whole) << "process round " << round;
    EXPECT_THAT(Entries(dir), ::testing::ElementsAre("shared.bin"));
  }
}

// The GGUF writer goes through it: a special target is refused.
TEST(AtomicFile, GgufWriterUsesIt) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  EXPECT_THAT(w.Write("/dev/null").message(), HasSubstr("character device"));
  const std::string dir = MakeDir("gguf");
  ASSERT_TRUE(w.Write(dir + "/m.gguf").ok());
  EXPECT_EQ(Slurp(dir + "/m.gguf").substr(0, 4), "GGUF");
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("m.gguf"));
}

}  // namespace
}  // namespace pi
