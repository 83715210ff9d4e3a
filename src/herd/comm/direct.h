// herd's collectives as stages of point-to-point transfers: the algorithms of every backend whose
// transport moves messages between two ranks (mpi/ in deterministic mode, gloo/).
//
// Each collective is at most two stages; in each, this rank exchanges one message with every peer:
//   - barrier: an empty message to and from every peer;
//   - broadcast: the root sends its buffer to every peer;
//   - all-gather: this rank's chunk to every peer, every peer's chunk into its slot;
//   - reduce-scatter: chunk j of this rank's input to rank j; the n inputs of this rank's chunk are
//     reduced in rank order (comm/reduce.h);
//   - all-reduce: a direct reduce-scatter of n near-equal chunks (stage 0), then a direct all-gather of
//     the reduced chunks (stage 1).
// Every byte comes from a known peer, so a backend that times out can name the peers whose data never
// came, and the results are bit-identical to the local backend and to a sequential rank-order sum.
// n - 1 messages per stage instead of a ring's log or 2(n - 1) steps of 1/n: on the group sizes a
// rank's messages take (tens of ranks at most on CPUs) the cost is the same bytes through each link.
#pragma once

#include <cstddef>
#include <vector>

#include "herd/comm/communicator.h"

namespace herd::comm {

// One message of a stage: `count` elements of the op's type to or from group rank `peer`.
struct Transfer {
  bool recv = false;
  int peer = -1;
  const void* send = nullptr;  // the data sent (recv false)
  void* into = nullptr;        // where received data goes (recv true)
  std::size_t count = 0;
};

class DirectCollective {
 public:
  // `op` is a collective (is_collective); rank and size are this rank's in the op's group.
  DirectCollective(const OpDesc& op, int group_rank, int group_size);

  int stage() const { return stage_; }
  // The messages of the current stage: post them all, then call finish_stage() once every one completed.
  const std::vector<Transfer>& transfers() const { return transfers_; }
  // Reduces what the stage received (in rank order) and sets up the next stage; true when the op is done.
  bool finish_stage();

 private:
  std::size_t eb() const;
  std::pair<std::size_t, std::size_t> chunk(int i) const;
  const char* cptr(const void* p, std::size_t elems) const;
  char* ptr(void* p, std::size_t elems) const;
  void exchange(int peer, const void* send, std::size_t send_count, void* into, std::size_t recv_count);
  void plan_stage();

  OpDesc op_;
  int grank_;
  int n_;
  int stage_ = 0;
  std::vector<Transfer> transfers_;
  std::vector<char> scratch_;
};

}  // namespace herd::comm
