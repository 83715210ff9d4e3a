// Names of element types, reductions and ops; the mpirun check and the pipeline tags.
#include "herd/comm/types.h"

#include <cstdlib>
#include <string>

namespace herd::comm {

ElemType elem_type(DType t) {
  switch (t) {
    case DType::kF32: return ElemType::kF32;
    case DType::kF64: return ElemType::kF64;
    case DType::kBF16: return ElemType::kBF16;
    case DType::kF16: return ElemType::kF16;
    case DType::kFP8: return ElemType::kFP8;
  }
  HERD_CHECK(false, "unknown DType");
  return ElemType::kF32;
}

std::size_t elem_bytes(ElemType t) {
  switch (t) {
    case ElemType::kF32: return 4;
    case ElemType::kF64: return 8;
    case ElemType::kBF16: return 2;
    case ElemType::kF16: return 2;
    case ElemType::kFP8: return 1;
    case ElemType::kI32: return 4;
    case ElemType::kI64: return 8;
  }
  return 0;
}

const char* elem_name(ElemType t) {
  switch (t) {
    case ElemType::kF32: return "fp32";
    case ElemType::kF64: return "fp64";
    case ElemType::kBF16: return "bf16";
    case ElemType::kF16: return "fp16";
    case ElemType::kFP8: return "fp8";
    case ElemType::kI32: return "i32";
    case ElemType::kI64: return "i64";
  }
  return "?";
}

bool is_reducible(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kF64 || t == ElemType::kI32 || t == ElemType::kI64;
}

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

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(var); v != nullptr) return std::atoi(v);
  }
  return 0;
}

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
