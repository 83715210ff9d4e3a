#include "herd/model/shard.h"

#include <string>

#include "herd/core/check.h"

namespace herd::model {

Status check_tp_divides(const char* field, std::int64_t value, std::int64_t tp) {
  HERD_CHECK(tp >= 1, "tp (", tp, ") must be at least 1; topology::ParallelDims checks the degrees first");
  if (value % tp == 0) return Status::Ok();
  return make_error(field, " (", value, ") is not divisible by tp (", tp, "); choose a tp that divides ", value);
}

Status check_cp_divides_seq(std::int64_t seq_len, std::int64_t cp) {
  HERD_CHECK(cp >= 1, "cp (", cp, ") must be at least 1; topology::ParallelDims checks the degrees first");
  if (seq_len > 0 && seq_len % (2 * cp) == 0) return Status::Ok();
  return make_error("seq_len (", seq_len, ") is not divisible by 2 x cp (", 2 * cp,
                    "): context parallelism cuts each sequence into 2 x cp chunks; use a multiple of ", 2 * cp);
}

Status check_dp_divides_batch(std::int64_t global_batch, std::int64_t dp, std::int64_t microbatch,
                              const BatchFieldNames& names) {
  HERD_CHECK(dp >= 1 && microbatch >= 1, "dp (", dp, ") and the micro-batch size (", microbatch,
             ") must be at least 1");
  const std::int64_t unit = dp * microbatch;
  if (global_batch % unit == 0) return Status::Ok();
  std::string by = std::string(names.dp) + " (" + std::to_string(dp) + ")";
  if (microbatch > 1) {
    by += " x " + std::string(names.microbatch) + " (" + std::to_string(microbatch) + ") = " + std::to_string(unit);
  }
  return make_error(names.global_batch, " (", global_batch, " sequences) is not divisible by ", by,
                    ": every data-parallel rank needs a whole number of ",
                    microbatch > 1 ? "micro-batches" : "sequences", "; use a multiple of ", unit);
}

Status check_sp_divides_seq(std::int64_t seq_len, std::int64_t cp, std::int64_t tp) {
  HERD_CHECK(tp >= 1 && cp >= 1, "tp (", tp, ") and cp (", cp, ") must be at least 1");
  if (tp == 1 || (seq_len / cp) % tp == 0) return Status::Ok();
  return make_error("seq_len / cp (", seq_len, " / ", cp, " = ", seq_len / cp, ") is not divisible by tp (", tp,
                    "), as sequence parallelism needs; use a seq_len that is a multiple of ", 2 * cp * tp,
                    " or turn sequence parallelism off");
}

Status check_shardable(const LlamaConfig& cfg, const ShardSpec& s) {
  HERD_RETURN_IF_ERROR(check_tp_divides("num_attention_heads", cfg.n_heads, s.tp));
  HERD_RETURN_IF_ERROR(check_tp_divides("num_key_value_heads", cfg.n_kv_heads, s.tp));
  HERD_RETURN_IF_ERROR(check_tp_divides("intermediate_size", cfg.ffn_hidden, s.tp));
  if (!s.vocab_padded) HERD_RETURN_IF_ERROR(check_tp_divides("vocab_size", cfg.vocab, s.tp));
  if (s.seq_len == 0) return Status::Ok();
  HERD_RETURN_IF_ERROR(check_cp_divides_seq(s.seq_len, s.cp));
  if (s.sequence_parallel) HERD_RETURN_IF_ERROR(check_sp_divides_seq(s.seq_len, s.cp, s.tp));
  return Status::Ok();
}

Result<CpSplit> make_cp_split(std::int64_t seq_len, std::int64_t cp, std::int64_t rank) {
  if (cp < 1) return make_error("cp (", cp, ") must be at least 1");
  if (rank < 0 || rank >= cp) return make_error("cp rank ", rank, " is outside cp (", cp, ")");
  HERD_RETURN_IF_ERROR(check_cp_divides_seq(seq_len, cp));
  return CpSplit{seq_len, cp, rank};
}

}  // namespace herd::model
