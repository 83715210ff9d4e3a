// FlatUnit: gather, release and reduce-scatter of one FSDP unit (see flat_unit.h).
#include "herd/parallel/fsdp/flat_unit.h"

#include <type_traits>

namespace herd::parallel::fsdp {

template <typename T>
FlatUnit<T>::FlatUnit(std::string name, std::int64_t count, comm::Communicator& dp, bool gather_bf16, bool keep_buffers,
                      const kernels::Ops& ops)
    : name_(std::move(name)), count_(count), dp_(&dp), ops_(&ops), bf16_(gather_bf16), keep_(keep_buffers) {
  HERD_CHECK(!gather_bf16 || (std::is_same_v<T, float>), "FSDP unit ", name_,
             ": bf16 gathers are of fp32 master weights");
  shard_ = (count + dp.size() - 1) / dp.size();
  begin_ = shard_ * dp.rank();
  in_place_ = dp.size() == 1;
  params_ = kernels::zeroed_array<T>(ops, shard_);
  grads_ = kernels::zeroed_array<T>(ops, shard_);
}

template <typename T>
FlatUnit<T>::~FlatUnit() {
  if (in_flight_) (void)handle_.wait();
  if (grads_in_flight_) (void)grad_handle_.wait();
}

template <typename T>
void FlatUnit<T>::begin_gather() {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_) {
      if (in_place_) {
        if (!full_h_) full_h_ = kernels::array_of<bf16>(*ops_, shard_);
        if (stale_) ops_->to_bf16(params_.as<T>(), shard_, full_h_.as<bf16>());
        stale_ = false;
        held_ = true;
        return;
      }
      if (held_) return;
      // This rank's shard rounded into its own place (unless the optimizer wrote it there), then gathered
      // in place around it.
      if (!full_h_) {
        full_h_ = kernels::array_of<bf16>(*ops_, padded());
        stale_ = true;
      }
      if (stale_) ops_->to_bf16(params_.as<T>(), shard_, full_h_.as<bf16>() + begin_);
      stale_ = false;
      handle_ = dp_->iall_gather(full_h_.as<bf16>() + begin_, full_h_.as<bf16>(), static_cast<std::size_t>(shard_),
                                 DType::kBF16);
      held_ = in_flight_ = true;
      return;
    }
  }
  if (in_place_) {
    held_ = true;  // the shard is the whole unit
    return;
  }
  if (held_) return;
  if (!full_) full_ = kernels::array_of<T>(*ops_, padded());
  handle_ = dp_->iall_gather(params_.as<T>(), full_.as<T>(), static_cast<std::size_t>(shard_), dtype_of<T>());
  held_ = in_flight_ = true;
}

template <typename T>
Status FlatUnit<T>::wait_gather() {
  begin_gather();
  if (!in_flight_) return Status::Ok();
  in_flight_ = false;
  return handle_.wait();
}

template <typename T>
bf16* FlatUnit<T>::shard_params_bf16() {
  if (!bf16_ || !(in_place_ || keep_)) return nullptr;
  HERD_CHECK(!in_flight_, "FSDP unit ", name_, ": bf16 weights written while their all-gather is in flight");
  if (!full_h_) {
    full_h_ = kernels::array_of<bf16>(*ops_, in_place_ ? shard_ : padded());
    stale_ = true;
  }
  return full_h_.as<bf16>() + (in_place_ ? 0 : begin_);
}

template <typename T>
void FlatUnit<T>::release() {
  HERD_CHECK(!in_flight_, "FSDP unit ", name_, " released while its all-gather is in flight");
  held_ = false;
  if (keep_) return;  // the buffer stays for the next gather
  full_.reset();
  if (!in_place_) full_h_.reset();
}

template <typename T>
double FlatUnit<T>::step_peak_bytes() const {
  const double e = static_cast<double>(sizeof(T));
  const double gathered = bf16_ ? 2.0 * static_cast<double>(in_place_ ? count_ : padded())
                                : (in_place_ ? 0.0 : e * static_cast<double>(padded()));
  const double full_grads = in_place_ ? 0.0 : e * static_cast<double>(padded());
  return gathered + full_grads + 4.0 * e * static_cast<double>(shard_);
}

template <typename T>
T* FlatUnit<T>::full_grads() {
  if (in_place_) return grads_.as<T>();  // accumulates into the shard; zero_grads() zeroes it
  if (!full_grads_) full_grads_ = kernels::array_of<T>(*ops_, padded());
  if (!grads_valid_) ops_->zero(full_grads_.as<T>(), sizeof(T) * static_cast<std::size_t>(padded()));
  grads_valid_ = true;
  return full_grads_.as<T>();
}

template <typename T>
void FlatUnit<T>::begin_reduce_scatter_grads() {
  HERD_CHECK(!grads_in_flight_, "FSDP unit ", name_, ": gradient reduce-scatter posted twice");
  if (in_place_) return;  // the sum over a group of one is the buffer itself
  grad_handle_ = dp_->ireduce_scatter(full_grads(), grads_.as<T>(), static_cast<std::size_t>(shard_), dtype_of<T>(),
                                      comm::ReduceOp::kSum);
  grads_in_flight_ = true;
}

template <typename T>
Status FlatUnit<T>::wait_grads() {
  if (!grads_in_flight_) return Status::Ok();
  grads_in_flight_ = false;
  const Status s = grad_handle_.wait();
  grads_valid_ = false;  // zeroed at its next use
  if (!keep_) full_grads_.reset();
  return s;
}

template <typename T>
void FlatUnit<T>::zero_grads() {
  HERD_CHECK(!grads_in_flight_, "FSDP unit ", name_, ": zero_grads with a reduce-scatter in flight");
  ops_->zero(grads_.as<T>(), sizeof(T) * static_cast<std::size_t>(shard_));
  grads_valid_ = false;
}

template class FlatUnit<float>;
template class FlatUnit<double>;

}  // namespace herd::parallel::fsdp
