// FlatUnit: gather, release and reduce-scatter of one FSDP unit (see flat_unit.h).
#include "herd/parallel/fsdp/flat_unit.h"

#include <cstring>

namespace herd::parallel::fsdp {

namespace {
template <typename T>
AlignedPtr<T> zeros(std::int64_t n) {
  AlignedPtr<T> p = aligned_array<T>(static_cast<std::size_t>(n));
  std::memset(p.get(), 0, sizeof(T) * static_cast<std::size_t>(n));
  return p;
}
}  // namespace

template <typename T>
FlatUnit<T>::FlatUnit(std::string name, std::int64_t count, comm::Communicator& dp)
    : name_(std::move(name)), count_(count), dp_(&dp) {
  shard_ = (count + dp.size() - 1) / dp.size();
  begin_ = shard_ * dp.rank();
  in_place_ = dp.size() == 1;
  params_ = zeros<T>(shard_);
  grads_ = zeros<T>(shard_);
}

template <typename T>
FlatUnit<T>::~FlatUnit() {
  if (in_flight_) (void)handle_.wait();
  if (grads_in_flight_) (void)grad_handle_.wait();
}

template <typename T>
void FlatUnit<T>::begin_gather() {
  if (in_place_) {
    held_ = true;  // the shard is the whole unit
    return;
  }
  if (full_) return;
  full_ = aligned_array<T>(static_cast<std::size_t>(padded()));
  handle_ = dp_->iall_gather(params_.get(), full_.get(), static_cast<std::size_t>(shard_), dtype_of<T>());
  in_flight_ = true;
}

template <typename T>
Status FlatUnit<T>::wait_gather() {
  begin_gather();
  if (!in_flight_) return Status::Ok();
  in_flight_ = false;
  return handle_.wait();
}

template <typename T>
void FlatUnit<T>::release() {
  HERD_CHECK(!in_flight_, "FSDP unit ", name_, " released while its all-gather is in flight");
  held_ = false;
  full_.reset();
}

template <typename T>
T* FlatUnit<T>::full_grads() {
  if (in_place_) return grads_.get();  // accumulates into the shard; zero_grads() zeroes it
  if (!full_grads_) full_grads_ = zeros<T>(padded());
  return full_grads_.get();
}

template <typename T>
void FlatUnit<T>::begin_reduce_scatter_grads() {
  HERD_CHECK(!grads_in_flight_, "FSDP unit ", name_, ": gradient reduce-scatter posted twice");
  if (in_place_) return;  // the sum over a group of one is the buffer itself
  grad_handle_ = dp_->ireduce_scatter(full_grads(), grads_.get(), static_cast<std::size_t>(shard_), dtype_of<T>(),
                                      comm::ReduceOp::kSum);
  grads_in_flight_ = true;
}

template <typename T>
Status FlatUnit<T>::wait_grads() {
  if (!grads_in_flight_) return Status::Ok();
  grads_in_flight_ = false;
  const Status s = grad_handle_.wait();
  full_grads_.reset();
  return s;
}

template <typename T>
void FlatUnit<T>::zero_grads() {
  HERD_CHECK(!grads_in_flight_, "FSDP unit ", name_, ": zero_grads with a reduce-scatter in flight");
  std::memset(grads_.get(), 0, sizeof(T) * static_cast<std::size_t>(shard_));
  full_grads_.reset();
}

template class FlatUnit<float>;
template class FlatUnit<double>;

}  // namespace herd::parallel::fsdp
