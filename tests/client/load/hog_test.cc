// How a hog spreads its charges over the server's per-CPU slots
// (client/load/hog.h): HogSlotStep and the slot -> CPU walk. No call is
// sent: the stub's channel is never connected.
#include "client/load/hog.h"

#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace cgacct::load {
namespace {

class HogTest : public ::testing::Test {
 protected:
  // The CPUs of hog `first_slot`'s first `n` charges.
  std::vector<uint32_t> Cpus(uint32_t first_slot, uint32_t step,
                             uint32_t nr_slots, uint32_t nr_cpus, int n) {
    Hog hog(*stub_, o_, "/g/hog-0", first_slot, step, nr_slots, nr_cpus, 4096);
    std::vector<uint32_t> cpus;
    for (int i = 0; i < n; ++i) {
      cpus.push_back(hog.cpu());
      hog.NextSlot();
    }
    return cpus;
  }

  LoadOptions o_;
  std::unique_ptr<v1::Accounting::Stub> stub_ = v1::Accounting::NewStub(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
};

TEST_F(HogTest, AsManySlotsAsHogsKeepsEachOnItsOwn) {
  EXPECT_EQ(HogSlotStep(/*nr_slots=*/4, /*hogs=*/4), 0u);
  // Hog 2 of 4 on 4 slots of 16 CPUs: slot 2 is CPU 8, every time.
  EXPECT_EQ(Cpus(2, 0, 4, 16, 3), (std::vector<uint32_t>{8, 8, 8}));
}

TEST_F(HogTest, AllCpusMovesEachHogOnByTheNumberOfHogs) {
  // 3 hogs over all 8 CPUs: step 3; hog 1 walks 1, 4, 7, 2, 5, 0, 3, 6.
  EXPECT_EQ(HogSlotStep(8, 3), 3u);
  EXPECT_EQ(Cpus(1, 3, 8, 8, 9),
            (std::vector<uint32_t>{1, 4, 7, 2, 5, 0, 3, 6, 1}));
}

TEST_F(HogTest, SlotsAreSpreadOverTheServersCpus) {
  // 2 slots of 400 CPUs: slot 0 is CPU 0, slot 1 is CPU 200.
  EXPECT_EQ(Cpus(0, 1, 2, 400, 3), (std::vector<uint32_t>{0, 200, 0}));
}

TEST(HogPathTest, GroupSlashHogIndex) {
  LoadOptions o;
  o.group = "/cgacct-load";
  EXPECT_EQ(HogPath(o, 7), "/cgacct-load/hog-7");
}

}  // namespace
}  // namespace cgacct::load
