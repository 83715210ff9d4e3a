# Optional third-party libraries (BLAS, MPI, CUDA). Later folders add their find_package calls here
# and set HERD_EXTERNAL_<folder> / HERD_HAVE_<thing>.

# data/: PCRE2 (UTF + UCP + JIT) defines the Llama 3 pre-split; liblzma reads .xz corpora and
# computes shard checksums (CRC-32). Debian: libpcre2-dev, liblzma-dev, pkg-config.
find_package(PkgConfig REQUIRED)
pkg_check_modules(HERD_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(HERD_LZMA REQUIRED IMPORTED_TARGET liblzma)
list(APPEND HERD_EXTERNAL_data PkgConfig::HERD_PCRE2 PkgConfig::HERD_LZMA)
