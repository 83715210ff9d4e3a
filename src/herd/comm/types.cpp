// Names of element types, reductions and ops; the pipeline tags.
#include "herd/comm/types.h"

#include <string>

namespace herd::comm {

bool is_reducible(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kI32 || t == DType::kI64; }

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kBarrier: return "barrier";
  }
  return "?";
}

bool is_collective(OpKind op) { return op != OpKind::kSend && op != OpKind::kRecv; }

Result<int> p2p_tag(int micro_batch, int virtual_stage, bool backward, int n_virtual_stages) {
  if (micro_batch < 0 || virtual_stage < 0 || virtual_stage >= n_virtual_stages) {
    return make_error("p2p_tag: micro_batch (", micro_batch, ") and virtual_stage (", virtual_stage,
                      ") must be >= 0 and virtual_stage < ", n_virtual_stages);
  }
  const long long tag =
      (static_cast<long long>(micro_batch) * n_virtual_stages + virtual_stage) * 2 + (backward ? 1 : 0);
  if (tag >= 32768) {
    return make_error("p2p_tag: micro_batch ", micro_batch, " x ", n_virtual_stages, " virtual stages needs tag ", tag,
                      ", over the 32767 that every MPI allows; reuse tags "
                      "modulo the number of micro-batches in flight");
  }
  return static_cast<int>(tag);
}

}  // namespace herd::comm
