#include "herd/comm/direct.h"

#include <cstring>

#include "herd/comm/reduce.h"
#include "herd/core/check.h"

namespace herd::comm {

DirectCollective::DirectCollective(const OpDesc& op, int group_rank, int group_size)
    : op_(op), grank_(group_rank), n_(group_size) {
  HERD_CHECK(is_collective(op.kind), "DirectCollective runs collectives, not ", op_name(op.kind));
  plan_stage();
}

std::size_t DirectCollective::eb() const { return dtype_bytes(op_.elem); }

std::pair<std::size_t, std::size_t> DirectCollective::chunk(int i) const { return chunk_range(op_.count, n_, i); }

const char* DirectCollective::cptr(const void* p, std::size_t elems) const {
  return static_cast<const char*>(p) + elems * eb();
}

char* DirectCollective::ptr(void* p, std::size_t elems) const { return static_cast<char*>(p) + elems * eb(); }

// A receive from `peer`, listed before the send to it (backends post in list order).
void DirectCollective::exchange(int peer, const void* send, std::size_t send_count, void* into,
                                std::size_t recv_count) {
  transfers_.push_back({true, peer, nullptr, into, recv_count});
  transfers_.push_back({false, peer, send, nullptr, send_count});
}

void DirectCollective::plan_stage() {
  transfers_.clear();
  switch (op_.kind) {
    case OpKind::kBarrier:
      for (int j = 0; j < n_; ++j) {
        if (j != grank_) exchange(j, nullptr, 0, nullptr, 0);
      }
      return;
    case OpKind::kBroadcast:
      if (grank_ == op_.peer) {
        for (int j = 0; j < n_; ++j) {
          if (j != grank_) transfers_.push_back({false, j, op_.recv, nullptr, op_.count});
        }
      } else {
        transfers_.push_back({true, op_.peer, nullptr, op_.recv, op_.count});
      }
      return;
    case OpKind::kAllGather:
      if (cptr(op_.recv, grank_ * op_.count) != op_.send && op_.count > 0) {
        std::memcpy(ptr(op_.recv, grank_ * op_.count), op_.send, op_.count * eb());
      }
      for (int j = 0; j < n_; ++j) {
        if (j != grank_) exchange(j, op_.send, op_.count, ptr(op_.recv, j * op_.count), op_.count);
      }
      return;
    case OpKind::kReduceScatter:
      scratch_.resize(n_ * op_.count * eb());
      for (int j = 0; j < n_; ++j) {
        if (j != grank_) {
          exchange(j, cptr(op_.send, j * op_.count), op_.count, scratch_.data() + j * op_.count * eb(), op_.count);
        }
      }
      return;
    case OpKind::kAllReduce: {
      const auto [b, e] = chunk(grank_);
      if (stage_ == 0) {
        // A direct reduce-scatter: chunk j of this rank's input goes to rank j.
        scratch_.resize(n_ * (e - b) * eb());
        for (int j = 0; j < n_; ++j) {
          if (j == grank_) continue;
          const auto [bj, ej] = chunk(j);
          exchange(j, cptr(op_.send, bj), ej - bj, scratch_.data() + j * (e - b) * eb(), e - b);
        }
      } else {
        // A direct all-gather of the reduced chunks.
        for (int j = 0; j < n_; ++j) {
          if (j == grank_) continue;
          const auto [bj, ej] = chunk(j);
          exchange(j, cptr(op_.recv, b), e - b, ptr(op_.recv, bj), ej - bj);
        }
      }
      return;
    }
    case OpKind::kSend:
    case OpKind::kRecv: break;
  }
  HERD_CHECK(false, "no direct algorithm for ", op_name(op_.kind));
}

bool DirectCollective::finish_stage() {
  std::vector<const void*> srcs(n_);
  if (op_.kind == OpKind::kAllReduce && stage_ == 0) {
    const auto [b, e] = chunk(grank_);
    for (int j = 0; j < n_; ++j) srcs[j] = j == grank_ ? cptr(op_.send, b) : scratch_.data() + j * (e - b) * eb();
    if (e > b) reduce_ordered(op_.elem, op_.reduce, srcs.data(), n_, ptr(op_.recv, b), e - b);
    scratch_.clear();
    stage_ = 1;
    plan_stage();
    return false;
  }
  if (op_.kind == OpKind::kReduceScatter) {
    for (int j = 0; j < n_; ++j) {
      srcs[j] = j == grank_ ? cptr(op_.send, grank_ * op_.count) : scratch_.data() + j * op_.count * eb();
    }
    if (op_.count > 0) reduce_ordered(op_.elem, op_.reduce, srcs.data(), n_, op_.recv, op_.count);
    scratch_.clear();
  }
  transfers_.clear();
  return true;
}

}  // namespace herd::comm
