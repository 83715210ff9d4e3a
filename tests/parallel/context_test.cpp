// ParallelGroups: every axis communicator of every rank holds exactly the ranks ParallelDims says.
#include "herd/parallel/context.h"

#include <gtest/gtest.h>

#include "comm/comm_test_util.h"

namespace herd::parallel {
namespace {

using comm::testing::run_ranks;
using topology::Dim;
using topology::ParallelDims;

TEST(ParallelContext, GroupsFromWorldMatchTheMesh) {
  const ParallelDims dims = *ParallelDims::make(2, 1, 2, 2);
  run_ranks(8, [&](comm::Communicator& world) -> Status {
    HERD_ASSIGN_OR_RETURN(auto groups, ParallelGroups::make(world, dims));
    const ParallelContext ctx = groups->context(/*sequence_parallel=*/false, /*reshard_after_forward=*/true);
    COMM_EXPECT(ctx.rank == world.rank() && !ctx.sequence_parallel && ctx.reshard_after_forward);
    const std::pair<comm::Communicator*, Dim> axes[] = {
        {ctx.tp, Dim::kTP}, {ctx.cp, Dim::kCP}, {ctx.pp, Dim::kPP}, {ctx.dp, Dim::kDP}};
    for (const auto& [c, d] : axes) {
      const auto want = dims.group(ctx.rank, d);
      COMM_EXPECT(c->size() == static_cast<int>(want.size()), topology::dim_name(d));
      for (std::size_t i = 0; i < want.size(); ++i) COMM_EXPECT(c->members()[i] == want[i]);
      COMM_EXPECT(c->rank() == dims.coord(ctx.rank)[d]);
    }
    COMM_EXPECT(ctx.tp_rank() == world.rank() % 2 && ctx.dp_rank() == world.rank() / 4);
    return Status::Ok();
  });
}

TEST(ParallelContext, RefusesDimsThatDoNotMatchTheWorld) {
  const ParallelDims dims = *ParallelDims::make(2, 1, 1, 2);
  run_ranks(2, [&](comm::Communicator& world) -> Status {
    auto groups = ParallelGroups::make(world, dims);
    COMM_EXPECT(!groups.ok());
    COMM_EXPECT(groups.error().message().find("needs 4 ranks but the world has 2") != std::string::npos,
                groups.error().message());
    return Status::Ok();
  });
}

TEST(ParallelContext, DefaultIsOneRank) {
  ParallelContext ctx;
  EXPECT_EQ(ctx.dims.world(), 1);
  EXPECT_EQ(ctx.tp_size(), 1);
}

}  // namespace
}  // namespace herd::parallel
